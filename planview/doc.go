// Package planview is what an operator reads of a migration's plan: the
// report of reshard plan (text and JSON), the problems that refuse a start,
// the command that starts what was planned, and the summary and details the
// Migration workflow shows in the Temporal UI. It renders; it computes
// nothing: the plan and its checks come from package plan (plan.Compute,
// plan.Checks), as the worker stores and runs them.
package planview
