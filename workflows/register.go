package workflows

import (
	"go.temporal.io/sdk/workflow"
)

// Registry is where workflows are registered: a worker, or a replayer.
type Registry interface {
	RegisterWorkflowWithOptions(w interface{}, options workflow.RegisterOptions)
}

// Register registers the Migration and Move workflows under their contract
// names.
func Register(r Registry) {
	r.RegisterWorkflowWithOptions(Migration, workflow.RegisterOptions{Name: MigrationWorkflow})
	r.RegisterWorkflowWithOptions(Move, workflow.RegisterOptions{Name: MoveWorkflow})
}
