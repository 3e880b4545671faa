package planview

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/reshard/reshard/workflows"
)

// Started is a migration its command started: the plan, its run and its
// link in the Temporal UI ("" for none).
type Started struct {
	Plan      *Plan
	RunID, UI string
}

// Write prints what was started, as JSON with asJSON, and how to follow it.
func (s Started) Write(out io.Writer, asJSON bool) error {
	p, id := s.Plan, s.Plan.Request.ID
	wfID := workflows.MigrationWorkflowID(id)
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			ID         string  `json:"id"`
			WorkflowID string  `json:"workflow_id"`
			RunID      string  `json:"run_id"`
			UI         string  `json:"ui,omitempty"`
			Summary    string  `json:"summary"`
			Moves      int     `json:"moves"`
			Moved      float64 `json:"moved_fraction"`
		}{id, wfID, s.RunID, s.UI, p.Summary(), len(p.Pairs), p.Moved})
	}
	fmt.Fprintf(out, "started migration %s: %s\n", id, p.Summary())
	fmt.Fprintf(out, "workflow  %s\n", wfID)
	fmt.Fprintf(out, "stream    %s\n", strings.TrimPrefix(p.Request.StreamText(), "stream "))
	if s.UI != "" {
		fmt.Fprintf(out, "ui        %s\n", s.UI)
	}
	fmt.Fprintf(out, "follow    reshard status %s --watch\n", id)
	return nil
}
