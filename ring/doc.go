// Package ring is the address book of reshard: token functions, the ring of
// vnode tokens, placement, token allocation, plans and their simulation. It is
// pure Go and does no I/O.
//
// Invariants:
//   - One convention: a range is (lo, hi], lower bound exclusive, upper bound
//     inclusive; the wrapping range is two ranges, (last, MaxToken] and
//     [MinToken, first]. No vnode token is MinToken.
//   - A token is computed the same in Go and in SQL: TokenInt64, TokenText and
//     TokenUUID are bit-exact with PostgreSQL 15's hashint8extended,
//     hashtextextended and uuid_hash_extended with seed 0 (see TokenSQL).
//   - A plan is the diff of two rings: a key whose token lies outside the moved
//     ranges never changes owner.
//
// One planner for any target ring: PlanRebalance takes the wanted end state
// (shards to add, shards to remove, new weights) and plans it as one change;
// add-node, split and remove-node are its special cases.
//
// Bounds the tests hold planners to: a balanced rebalance moves the least any
// plan can (the sum of every shard's excess over its weighted share; adding K
// shards to N balanced ones: K/(N+K)), ends every shard at its weighted share
// (max/mean ≤ 1.05, in fact exact up to a token at any vnode count), and no
// shard both gives and receives, so no range moves twice; a split moves
// exactly the split fraction of one shard; a remove of a balanced ring moves
// exactly the removed shard's share.
//
// Layout: token.go is the token function of each key type (the same as
// PostgreSQL's hash functions, tested on its vectors); ring.go the ring and
// its owners; range.go ranges, predicates and their text forms; alloc.go
// chooses vnode tokens by weight, placement.go replicas across domains;
// plan.go and rebalance.go turn a change into moves (PlanRebalance, which
// add-node, split and remove-node call through PlanChange); overlay.go is the ring of a migration in progress;
// simulate.go compares hashing algorithms; request.go reads the ring commands'
// requests as an operator writes them (refusals are *InputError).
package ring
