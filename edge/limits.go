package edge

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
)

// Limits bounds the sizes of tool arguments. They are checked in the
// handlers, before the arguments are validated or copied, so they hold for
// every transport (stdio, the daemon's socket, HTTP, an in-process child).
// Zero fields mean the defaults given; each names the config key
// (limits.*) that raises it.
type Limits struct {
	PromptBytes       int // subagent.prompt; zero: 1 MiB (limits.prompt_bytes)
	MessageBytes      int // send_message.message, report.output; zero: 1 MiB (limits.message_bytes)
	PersonaBytes      int // subagent.persona; zero: 64 KiB (limits.persona_bytes)
	OutputSchemaBytes int // subagent.output_schema, as JSON; zero: 64 KiB (limits.output_schema_bytes)
	AgentIDBytes      int // send_message.subagent_id, interrupt_agent.agent_id; zero: 256 (limits.agent_id_bytes)
	LabelBytes        int // subagent.description; zero: 256 (limits.label_bytes)
	CwdBytes          int // subagent.cwd; zero: 4096 (limits.cwd_bytes)
	ToolFilterNames   int // names in tool_filter.allow or .deny; zero: 256 (limits.tool_filter_names)
}

const (
	// maxNameBytes bounds a tool name in a filter, a provider name, and
	// the enum-valued arguments.
	maxNameBytes = 128
	// maxOtherBytes bounds any other argument, known or not (an unknown
	// one is refused by the schema, whose error must stay short).
	maxOtherBytes = 1024
	// maxErrorBytes bounds the text of an error result: whatever an
	// error quotes of its input, the result stays short.
	maxErrorBytes = 1024
)

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func (l Limits) withDefaults() Limits {
	return Limits{
		PromptBytes:       orDefault(l.PromptBytes, 1<<20),
		MessageBytes:      orDefault(l.MessageBytes, 1<<20),
		PersonaBytes:      orDefault(l.PersonaBytes, 64<<10),
		OutputSchemaBytes: orDefault(l.OutputSchemaBytes, 64<<10),
		AgentIDBytes:      orDefault(l.AgentIDBytes, 256),
		LabelBytes:        orDefault(l.LabelBytes, 256),
		CwdBytes:          orDefault(l.CwdBytes, 4096),
		ToolFilterNames:   orDefault(l.ToolFilterNames, 256),
	}
}

// fieldLimit is the bound of one argument: bytes (of a string, or of a
// value as JSON), and the config key that raises it ("" for fixed ones).
type fieldLimit struct {
	bytes int
	key   string
}

func (l Limits) field(tool, name string) fieldLimit {
	switch tool + "." + name {
	case "subagent.prompt":
		return fieldLimit{l.PromptBytes, "limits.prompt_bytes"}
	case "send_message.message", "report.output", "permission_prompt.input": // a file to write, as the agent would write it
		return fieldLimit{l.MessageBytes, "limits.message_bytes"}
	case "subagent.persona":
		return fieldLimit{l.PersonaBytes, "limits.persona_bytes"}
	case "subagent.output_schema":
		return fieldLimit{l.OutputSchemaBytes, "limits.output_schema_bytes"}
	case "send_message.subagent_id", "interrupt_agent.agent_id":
		return fieldLimit{l.AgentIDBytes, "limits.agent_id_bytes"}
	case "subagent.description":
		return fieldLimit{l.LabelBytes, "limits.label_bytes"}
	case "subagent.cwd":
		return fieldLimit{l.CwdBytes, "limits.cwd_bytes"}
	case "subagent.provider", "list_agents.scope", "report.delivery":
		return fieldLimit{maxNameBytes, ""}
	case "subagent.tool_filter":
		// Checked name by name; this bounds the object as a whole.
		return fieldLimit{2 * l.ToolFilterNames * (maxNameBytes + 3), ""}
	}
	return fieldLimit{maxOtherBytes, ""}
}

// total bounds a call's arguments as a whole (as JSON, for the raw
// arguments of an in-process child's call).
func (l Limits) total() int {
	return l.PromptBytes + l.MessageBytes + l.PersonaBytes + l.OutputSchemaBytes + 64<<10
}

// check refuses arguments over their limits. It reads sizes only, stops
// as soon as a bound is passed, and its errors quote nothing of the input
// but the names of the fields: a 100 MB prompt costs no copy, and a 1 MB
// id does not come back in the error.
func (l Limits) check(tool string, args any) error {
	switch raw := args.(type) {
	case json.RawMessage:
		return l.checkRaw(tool, raw)
	case []byte:
		return l.checkRaw(tool, raw)
	}
	m, ok := args.(map[string]any)
	if !ok {
		return nil // not an object: the schema refuses it
	}
	for name, v := range m {
		if len(name) > maxNameBytes {
			return fmt.Errorf("an argument name is %d bytes long; %s takes no such argument", len(name), tool)
		}
		if name == "tool_filter" && tool == "subagent" {
			if err := l.checkFilter(v); err != nil {
				return err
			}
		}
		fl := l.field(tool, name)
		if n, over := jsonSize(v, fl.bytes); over {
			return tooLarge(name, n, fl)
		}
	}
	return nil
}

func (l Limits) checkRaw(tool string, raw []byte) error {
	if max := l.total(); len(raw) > max {
		return fmt.Errorf("the arguments are %d bytes of JSON; at most %d are accepted", len(raw), max)
	}
	var m any
	if json.Unmarshal(raw, &m) != nil {
		return nil // the validator words it
	}
	return l.check(tool, m)
}

func (l Limits) checkFilter(v any) error {
	f, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	for _, k := range []string{"allow", "deny"} {
		names, ok := f[k].([]any)
		if !ok {
			continue
		}
		if len(names) > l.ToolFilterNames {
			return fmt.Errorf("field \"tool_filter.%s\" lists %d names; at most %d are accepted (limits.tool_filter_names in the server's config)", k, len(names), l.ToolFilterNames)
		}
		for i, n := range names {
			if s, ok := n.(string); ok && len(s) > maxNameBytes {
				return fmt.Errorf("field \"tool_filter.%s[%d]\" is %d bytes; a tool name is at most %d", k, i, len(s), maxNameBytes)
			}
		}
	}
	return nil
}

func tooLarge(name string, n int, fl fieldLimit) error {
	size := fmt.Sprintf("is %d bytes", n)
	if n < 0 {
		size = "is larger"
	}
	if fl.key == "" {
		return fmt.Errorf("field %q %s; at most %d are accepted", name, size, fl.bytes)
	}
	return fmt.Errorf("field %q %s; at most %d are accepted (%s in the server's config); shorten it, or put the material in a file in the child's cwd and point to it", name, size, fl.bytes, fl.key)
}

// jsonSize is about the size of v as JSON (a string counts its bytes), and
// whether it exceeds budget. It stops counting past budget, returning -1
// when the exact size was not reached; a string's size is always exact.
func jsonSize(v any, budget int) (n int, over bool) {
	switch x := v.(type) {
	case string:
		return len(x), len(x) > budget
	case map[string]any:
		n = 2
		for k, e := range x {
			m, o := jsonSize(e, budget-n)
			n += len(k) + 4 + max(m, 0)
			if o || n > budget {
				return -1, true
			}
		}
	case []any:
		n = 2
		for _, e := range x {
			m, o := jsonSize(e, budget-n)
			n += 1 + max(m, 0)
			if o || n > budget {
				return -1, true
			}
		}
	default: // numbers, booleans, null
		n = 8
	}
	return n, n > budget
}

// checkLabel refuses a label (a child's description, shown in lists and
// logs) that is not plain one-line text: control characters (NUL, line
// breaks, the ESC of ANSI sequences), line separators, bidi controls
// (which reorder what a terminal shows), and invalid UTF-8. They are
// refused, not stripped, so what is shown is what was asked for.
func checkLabel(field, s string) error {
	for i, r := range s {
		what := ""
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				what = "invalid UTF-8"
			}
		case unicode.IsControl(r):
			what = "a control character"
		case r == '\u2028' || r == '\u2029':
			what = "a line separator"
		case isBidiControl(r):
			what = "a bidirectional-text control"
		}
		if what != "" {
			return fmt.Errorf("field %q must be plain text on one line: it holds %s (%U) at byte %d; remove it", field, what, r, i)
		}
	}
	return nil
}

func isBidiControl(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// displayLabel shows a stored label on one line whatever it holds (labels
// stored before checkLabel existed may hold anything): refused characters
// are shown escaped.
func displayLabel(s string) string {
	if checkLabel("", s) == nil {
		return s
	}
	var b []byte
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				b = fmt.Appendf(b, `\x%02x`, s[i])
				continue
			}
		}
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || isBidiControl(r) {
			b = fmt.Appendf(b, `\u%04x`, r)
			continue
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// clip bounds an error's text, cutting at a rune boundary.
func clip(s string) string {
	if len(s) <= maxErrorBytes {
		return s
	}
	kept := truncate.Prefix(s, maxErrorBytes)
	return fmt.Sprintf("%s … [%d more bytes cut]", kept, len(s)-len(kept))
}
