// Package request turns an operator's options for a migration (the flags
// of reshard add-node, split, remove-node, move, rebalance and throttle)
// into the workflows' request, without cobra: every check that needs no
// database, each error naming the flag and the fix. The workflow's own
// validation (workflows.MigrationRequest.Validate) runs last, so a request
// built here is one the workflow accepts.
//
// It is not a domain package: it builds the workflows' contract, and
// imports nothing that opens a connection.
package request
