from tern.cli import app

app(prog_name="tern")
