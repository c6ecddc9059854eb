package manager

import "github.com/mcp-subagent/mcp-subagent/seam"

// GatedDriver is implemented by drivers that ask DriverRequest.Budget
// before every side effect — each tool round: a tool call, a grandchild,
// a report — and before each model call. A new foreground child on such a
// driver starts its first turn at once, its model call overlapping the
// commit of its record, because nothing it does beyond calling the model
// happens before the record is stored (the tool round waits for it); a
// short turn's record, journal and settlement then share one commit. Other
// drivers (an external CLI acts from its first moment) start only once
// the record is committed.
type GatedDriver interface {
	seam.Driver
	// GatesSideEffects marks the ability; it is never called.
	GatesSideEffects()
}
