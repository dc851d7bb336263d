"""benchtools: the operator's tools, the code that runs on the machine a person types on, never inside Airflow.

* ``cli``: the ``bench`` command (run, validate, parse, sql, compare, migrate, pools, up, down);
* ``runner``: ``bench run``, quiet (``dag.test()`` in a child process, one line per task, Ctrl-C undoes the run);
* ``up`` and ``stack``: ``bench up``/``bench down``, and the one launcher of Airflow's components as processes that
  the tests' stack tier and ``bench/`` use too; ``metadata_db`` chooses this checkout's metadata database;
* ``airflow_env``: pointing Airflow at this project; ``loopback_sshd``: a real sshd on loopback as a GPU host;
  ``net``: loopback ports.

It imports the runtime library (:mod:`benchflow`) and the host core (:mod:`benchhost`); nothing imports it.
"""
