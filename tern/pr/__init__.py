"""``tern pr``: open and maintain migration pull requests from CI.

``open_pull_requests(Options(...), say=..., note=...)`` is the whole command; ``git``, ``github``,
``branch``, ``packages`` and ``body`` are its parts (the git plumbing, the REST client, the
rules for the bot's branch, which packages, and what the pull request says).
"""

from tern.pr.run import Options, open_pull_requests

__all__ = ["Options", "open_pull_requests"]
