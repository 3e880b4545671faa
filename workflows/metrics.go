package workflows

// PhaseTimer is the metric name the workflows record phase durations under
// (through workflow.GetMetricsHandler, which is silent during replay), with
// the tag "phase"; the worker's metrics handler turns it into a histogram.
const PhaseTimer = "reshard_phase_duration"

// PhaseAwaitingApproval labels, in the phase timer, the time CUTOVER waited
// for an operator's approval (reshard approve), which the CUTOVER label does
// not count.
const PhaseAwaitingApproval = "AWAITING_APPROVAL"
