"""Regression cases: record a run with everything needed to replay it, replay it, report.

===========  ==================================================================================
``case``     the on-disk format of a case, and reading one back with its files verified
``record``   ``cuvil-dsl record``: run a spec and write a case atomically
``replay``   ``cuvil-dsl replay``: run a case again and check it; re-record it in place
``checks``   the checks of a replay, each a pure function naming what differs
``timing``   noise-aware timing rounds and the regression verdict
``identity`` the toolchain and machine a recording came from (what decides the exact rule)
``html``     the self-contained HTML report and the JSON one
``plugin``   the pytest plugin: every ``regression/**/case.yaml`` as test items
===========  ==================================================================================

Nothing is imported here: the pytest plugin is loaded by every pytest run in an environment
where cuvil-dsl is installed, and must cost nothing where there are no cases.
"""
