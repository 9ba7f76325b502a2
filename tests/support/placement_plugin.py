"""The source of a test plugin's placement ``here``: it runs actors in this process, as
``start_actor`` would, and records what happens in ``EVENTS``. Tests install it with the
``install_plugins`` fixture, adding the ``@hookimpl`` functions they need."""

HERE_PLACEMENT = """
import contextlib
from pdc_core.backend import hookimpl
from pdc_core.lowlevel import runner_for

EVENTS = []


class Here:
    '''A placement that runs the actor in this process, as start_actor would.'''

    def runner_for(self, target, /, args, options):
        EVENTS.append(("placed", options.name))
        return runner_for(target, args, options)


@contextlib.asynccontextmanager
async def open_here():
    EVENTS.append("open")
    try:
        yield Here()
    finally:
        EVENTS.append("close")
"""
