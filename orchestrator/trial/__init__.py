"""The value types every floor above shares: what a trial is and what a trial reports. They import only the
study format (study/), errors.py, folders.py and dape_core, so that tracking/, planning/, execution/,
reporting/ and evaluation/ all read them from below.

- trials.py: `Trial`, a study expanded into trials (`expand`), the concrete trial behind a Tune config
  (`materialize`), rows that share one trial (`distinct`, `shared_rows`) and the tags a trial's run may carry
  in a store (`StoredIdentities`); a trial's identity itself is the study's (study/identity.py);
- protocol.py: what a trial reports, shared by the worker that reports it and the driver that reads it.

Nothing is imported here: a Ray worker imports protocol.py without the rest.
"""
