"""File formats: schedule files (``schedfile``) and crontabs (``crontab``) ⇄ definitions.

Invariants:
* a format only translates text into validated ``ScheduleDef``s (and back, for
  export); it never touches a store, a coordinator or a runner;
* every definition a format yields went through the one validator the other front
  ends use, so a file, ``clockctl add`` and the API refuse the same things with the
  same messages (plus the ``file:line`` a file refusal carries).
"""
