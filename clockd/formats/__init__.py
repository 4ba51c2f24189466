"""File formats: schedule files (``schedfile``) and crontabs (``crontab``) ⇄ definitions,
and ``validate`` (``normalize``), the one validator every front end runs on a definition.

Invariants:
* a format only translates text into validated ``ScheduleDef``s (and back, for
  export); it never reaches a store or a coordinator and never runs a target (the
  write-side target checks it uses are ``clockd.runner.targets``);
* every definition a format yields went through ``validate.normalize``, as the other
  front ends' do, so a file, ``clockctl add`` and the API refuse the same things with the
  same messages (plus the ``file:line`` a file refusal carries).
"""
