"""tox's in-tree plugin (tox loads toxfile.py from the project root by itself).

It only records where tox was started from, for scripts/gpu_env.py and the environments that
run in cpu's virtualenv: the interpreter tox runs on (users install tox beside their torch, so
the cuda env finds torch there) and the virtualenv that was active. It must be recorded here,
at load: in every command tox runs, VIRTUAL_ENV already names tox's own environment. ``pass_env``
(ATTN_*) hands both to the commands.
"""
import os
import sys

os.environ.setdefault("ATTN_TOX_PYTHON", sys.executable)
if os.environ.get("VIRTUAL_ENV"):
    os.environ.setdefault("ATTN_HOST_VIRTUAL_ENV", os.environ["VIRTUAL_ENV"])
