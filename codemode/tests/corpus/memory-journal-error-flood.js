// expect: waiting
// A loop of failing calls: each error is journaled, bounded by maxSnapshotBytes per run.
for (;;) { try { await failing({}); } catch (e) {} }
