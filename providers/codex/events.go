package codex

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
)

// event is one line of `codex exec --json` (exec_events.rs).
type event struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id,omitempty"` // thread.started
	Item     *item  `json:"item,omitempty"`      // item.*
	Usage    *usage `json:"usage,omitempty"`     // turn.completed
	Error    *msg   `json:"error,omitempty"`     // turn.failed
	Message  string `json:"message,omitempty"`   // top-level error
}

type msg struct {
	Message string `json:"message"`
}

// usage is what turn.completed reports: the thread's running total, not
// the turn's own share (a resumed thread counts its earlier turns too).
type usage struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
}

type item struct {
	ID               string   `json:"id"`
	Type             string   `json:"type"`
	Text             string   `json:"text,omitempty"`              // agent_message, reasoning
	Command          string   `json:"command,omitempty"`           // command_execution
	AggregatedOutput string   `json:"aggregated_output,omitempty"` // command_execution
	ExitCode         *int     `json:"exit_code,omitempty"`         // command_execution
	Status           string   `json:"status,omitempty"`            // command_execution, file_change, mcp_tool_call
	Changes          []change `json:"changes,omitempty"`           // file_change
	Server           string   `json:"server,omitempty"`            // mcp_tool_call
	Tool             string   `json:"tool,omitempty"`              // mcp_tool_call
	Error            *msg     `json:"error,omitempty"`             // mcp_tool_call
	Message          string   `json:"message,omitempty"`           // error
	Query            string   `json:"query,omitempty"`             // web_search
}

type change struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

// decode parses one JSONL line; blank lines yield ok false.
func decode(line []byte) (e event, ok bool, err error) {
	if len(strings.TrimSpace(string(line))) == 0 {
		return e, false, nil
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return e, false, err
	}
	return e, e.Type != "", nil
}

// deniedMarkers are what a sandbox refusal looks like in a command's output.
var deniedMarkers = []string{"Read-only file system", "Permission denied", "Operation not permitted"}

// describe turns a completed item into the note recorded in the journal and,
// where something went wrong, a diagnostic line.
func (it *item) describe() (note, diag string) {
	switch it.Type {
	case "command_execution":
		code := "?"
		if it.ExitCode != nil {
			code = fmt.Sprint(*it.ExitCode)
		}
		cmd := truncate.Head(it.Command, 200)
		note = fmt.Sprintf("ran: %s (exit %s)", cmd, code)
		for _, m := range deniedMarkers {
			if strings.Contains(it.AggregatedOutput, m) {
				return note, fmt.Sprintf("denied (sandbox or permissions): %s (%s)", cmd, m)
			}
		}
		if it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0) {
			diag = fmt.Sprintf("command failed: %s (exit %s)", cmd, code)
		}
		return note, diag
	case "file_change":
		parts := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			parts = append(parts, c.Kind+" "+c.Path)
		}
		what := truncate.Head(strings.Join(parts, ", "), 300)
		note = "changed: " + what
		if it.Status == "failed" || it.Status == "declined" {
			diag = "file change failed: " + what
		}
		return note, diag
	case "mcp_tool_call":
		name := it.Server + "." + it.Tool
		note = "called: " + name
		if it.Error != nil && it.Error.Message != "" {
			diag = fmt.Sprintf("tool call failed: %s: %s", name, truncate.Head(it.Error.Message, 300))
		} else if it.Status == "failed" {
			diag = "tool call failed: " + name
		}
		return note, diag
	case "web_search":
		return "searched: " + truncate.Head(it.Query, 200), ""
	case "error":
		return "", truncate.Head(it.Message, 500)
	}
	return "", ""
}
