from tern.entry import main

main()
