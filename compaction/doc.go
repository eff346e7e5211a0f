// Package compaction holds the parts of bloomkv's compaction that need no
// I/O: pure functions of segment metadata and filters, called by the DB,
// which does the reading, writing and committing.
//
//   - The policy (policy.go: SizeTiered) picks which contiguous run
//     of live segments to merge next: size-tiered, FanIn segments of one
//     tier into one of the next, as Bigtable's merging compactions; it also
//     says when writers should stall for it.
//   - The version filter (dedup.go: Dedup) runs over the merged stream of a
//     flush or a merge (internal/merge) and keeps, for each key, the
//     newest version and the newest below every open snapshot, dropping the
//     rest, and tombstones too when the merge includes the oldest data.
//   - Filter planning (filters.go: PlanFilter, RightSize, Fold) decides how
//     a merge gets its output's Bloom filter: the union of the inputs'
//     filters when that is exact and keeps the target false-positive rate,
//     otherwise by hashing the merged keys again.
//   - The filter budget (budget.go: PlanBudget) fits the resident filters
//     of all segments into Options.FilterBudget by halving the ones where
//     that costs the fewest expected extra block reads.
//
// DESIGN.md has the arithmetic, the simulations and the measurements.
package compaction
