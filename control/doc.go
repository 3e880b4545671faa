// Package control is the operator's side of the control plane: the calls an
// operator's command makes to Temporal about migrations, without cobra. It
// starts a migration's workflow, lists migrations from the visibility
// store, sends the operator Updates (pause, resume, throttle, approve,
// rollback, complete, reverify) and maps the workflow's refusals to
// *Rejected, asks whether a worker polls the task queue and whether a
// migration's workflows still run (Lives: once per migration, for topology
// check), and asks Temporal about requests it holds unanswered. It dials
// Temporal (Dial) and links a workflow's page in the UI (UILink).
//
// It is not a domain package: it imports Temporal's client, the workflows'
// contract (names, ids, search attributes) and the topology store (the
// workers' own reports); no data-plane package imports it. What a command
// prints stays in cmd/reshard; what it asks Temporal is here, once.
package control
