"""Use cases over the ports: what ``clockctl`` (and the daemon's reload and leader) ask for.

* ``ops``: every change a user can make (add, update, pause, resume, delete, apply,
  tenants, dead letters) and the reads behind ``list``/``show``/``runs``;
* ``reconcile``: which expected instants are not accounted for (``clockctl
  reconcile``, ``status``, and the leader's periodic sample);
* ``explain``: why an instant ran, did not run, or will run (``clockctl explain``).

Invariants: services take a ``Store`` (the port) and ``now`` or a ``Clock``; they
never pick or import an adapter (``clockd.wiring`` does), never import the CLI, and
never read the environment.
"""
