//go:build e2e

package backfill

import (
	"testing"
	"time"
)

// TestStreamDuringLongCopyLosesNothing is TestStreamDuringCopyLosesNothing
// with a copy throttled to last 30 s (make e2e).
func TestStreamDuringLongCopyLosesNothing(t *testing.T) {
	streamDuringCopy(t, 30*time.Second)
}
