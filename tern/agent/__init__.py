"""The LLM fallback: what the rules leave goes to an OpenAI-compatible model one unit at a
time, and only answers the sandbox verifies are kept (``loop.py``)."""
