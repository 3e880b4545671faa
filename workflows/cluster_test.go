package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
)

// The migration's cluster id reaches every activity's input unchanged, and
// an activity refused by a worker of another cluster (here the cutover, a
// phase where other errors fail the move) stops the move for the operator
// with the refusal's words; resume runs the phase again and the migration
// ends DONE.
func TestWrongClusterStopsTheMoveUntilResumed(t *testing.T) {
	env, f := newEnv(t)
	const msg = "migration t belongs to cluster cluster-a, and this worker's control database is cluster cluster-b's: this worker did nothing"
	cut := f.cutover
	f.cutover = func(in CutoverInput, n int) (CutoverResult, error) {
		if in.Move.Spec.ID == "t_m1" && n == 1 {
			return CutoverResult{}, temporal.NewNonRetryableApplicationError(msg, ErrTypeWrongCluster, nil)
		}
		return cut(in, n)
	}
	var r *resumed
	env.RegisterDelayedCallback(func() {
		r = resumeStopped(t, env, func(m MoveState) {
			if m.Spec.ID != "t_m1" || m.Phase != PhaseCutover || !strings.Contains(m.Error, "stopped in CUTOVER: "+msg) {
				t.Errorf("move %s: phase %s, error %q", m.Spec.ID, m.Phase, m.Error)
			}
		})
	}, 3*time.Hour)
	req := testRequest()
	req.Cluster = "cluster-a"
	env.ExecuteWorkflow(MigrationWorkflow, req)
	r.wantDone(t, env)
	if n := f.count(ActivityCutover + "/t_m1"); n != 2 {
		t.Errorf("t_m1's cutover ran %d times, want 2 (refused, then after resume)", n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, in := range f.last {
		var cluster string
		switch v := in.(type) {
		case MigrationRequest:
			cluster = v.Cluster
		case PublishInput:
			cluster = v.Request.Cluster
		case MoveRef:
			cluster = v.Request.Cluster
		case CopySliceInput:
			cluster = v.Move.Request.Cluster
		case CDCInput:
			cluster = v.Move.Request.Cluster
		case VerifyInput:
			cluster = v.Move.Request.Cluster
		case CutoverInput:
			cluster = v.Move.Request.Cluster
		case EndInput:
			cluster = v.Move.Request.Cluster
		default:
			t.Errorf("activity %s: input %T not checked", name, in)
			continue
		}
		if cluster != "cluster-a" {
			t.Errorf("activity %s got cluster %q, want the request's cluster-a", name, cluster)
		}
	}
	if len(f.last) < 10 {
		t.Errorf("%d activities recorded, want every one the migration ran", len(f.last))
	}
}
