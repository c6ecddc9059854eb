package main

import (
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
)

// echoBytes bounds what of a request's own input (an op, an id) an error
// or a log line repeats: enough to recognise it, never the megabyte a
// client may send.
const echoBytes = 200

// maxIDBytes bounds a subagent id the command line and the admin
// operations take: ids this server mints are 22 bytes ("agent-" and 16 hex
// digits), and the tools refuse ids over limits.agent_id_bytes (default
// 256). A longer one is refused before anything looks it up, logs it or
// quotes it whole.
const maxIDBytes = 256

// checkID is nil for an id of at most maxIDBytes; otherwise an
// INVALID_REQUEST error quoting only its start.
func checkID(id string) error {
	if len(id) <= maxIDBytes {
		return nil
	}
	return fmt.Errorf("INVALID_REQUEST: field \"id\": %q is %d bytes, no subagent id (at most %d); use an id mcp-subagent ls shows",
		truncate.Head(id, 40), len(id), maxIDBytes)
}
