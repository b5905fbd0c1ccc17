"""Not a library: a package only so that ``scripts.support`` imports (with the checkout on
``sys.path``) ahead of any other top-level ``scripts``."""
