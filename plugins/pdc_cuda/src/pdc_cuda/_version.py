#: The version of pdc-cuda, as its package metadata gives it (CHANGELOG.md says what
#: changed in it).
__version__ = "0.2.0"
