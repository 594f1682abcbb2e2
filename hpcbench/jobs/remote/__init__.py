"""Working from a laptop: a batch system's commands run on the cluster's login node over SSH,
and the files a job needs go there and its results come back.

:class:`~hpcbench.jobs.remote.host.RemoteHost` is one login node (``user@login.cluster`` or an alias
of the user's ``~/.ssh/config``) and the working directory there that mirrors the local one.
:func:`~hpcbench.jobs.remote.context.using` makes it the place where every scheduler command of the
block runs (:func:`hpcbench.jobs.schedulers.commands.run_process` asks
:func:`~hpcbench.jobs.remote.context.current`). The user's own OpenSSH client does the work: their
config, agent and keys, and one multiplexed connection for every command (``ControlMaster``);
hpcbench never stores or asks for a password, and never turns host-key checking off.
"""

from hpcbench.jobs.remote.context import current, using
from hpcbench.jobs.remote.host import LoginUnreachable, RemoteError, RemoteHost, login_for

__all__ = ["LoginUnreachable", "RemoteError", "RemoteHost", "current", "login_for", "using"]
