# The tree is always the next release's development version. The first release published as
# "aiokpl" must be a final 1.0.0, never a pre-release: the name's index already holds another
# project's 0.2.0, which pip prefers to any pre-release (docs/contributing.md, "Versions and
# releases").
__version__ = "1.0.0.dev0"
