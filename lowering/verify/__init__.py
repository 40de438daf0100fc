"""The checks lowering proves a kernel with, and the reports over its shared memory.

    accesses        the shared-memory bytes each statement touches (the one list)
    hazards         the sm_80 hazard analysis (cp.async, barriers) sync insertion and
                    verify_hazards share
    async_protocol  the Hopper async protocol's proof (mbarriers, TMA, wgmma, bulk
                    stores): async_skeleton classifies loops and ifs, async_trace unrolls
                    role traces, async_order builds the happens-before graph,
                    async_runtime covers run-time trip counts and block-uniform outcomes
                    (async_periodic: expressions periodic in a loop variable)
    async_syncs     the fences, waits and barriers the async protocol's findings ask for
    bank_conflicts  the static bank-conflict report
The passes insert_syncs and verify_hazards (lowering/passes) call these; the CLI's check
and inspect commands show their findings.
"""
