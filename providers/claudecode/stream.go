package claudecode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/extturn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// line is one line of `claude -p --output-format stream-json --verbose`.
// Only the fields the provider reads are declared; the CLI adds others
// freely between versions.
type line struct {
	Type            string   `json:"type"` // system, assistant, user, result, …
	Subtype         string   `json:"subtype"`
	SessionID       string   `json:"session_id"`
	ParentToolUseID *string  `json:"parent_tool_use_id"` // set on a nested (Task) agent's lines
	Message         *message `json:"message"`
	// Error marks a synthetic assistant message the CLI wrote itself (an
	// API failure), not the model's words.
	Error json.RawMessage `json:"error"`

	// The result line's fields.
	IsError           bool            `json:"is_error"`
	Result            string          `json:"result"`
	NumTurns          int             `json:"num_turns"`
	TotalCostUSD      float64         `json:"total_cost_usd"`
	Usage             *usage          `json:"usage"`
	PermissionDenials []denial        `json:"permission_denials"`
	StructuredOutput  json.RawMessage `json:"structured_output"`
	Errors            json.RawMessage `json:"errors"`
}

type message struct {
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"` // blocks; a plain string in some user lines
	Usage   *usage          `json:"usage"`
}

type block struct {
	Type string `json:"type"` // text, thinking, tool_use, tool_result, …
	Text string `json:"text"`
	Name string `json:"name"` // tool_use
}

type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// tokens counts every input token the model read, cached or not.
func (u usage) tokens() seam.Usage {
	return seam.Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens}
}

type denial struct {
	ToolName string `json:"tool_name"`
}

// parseLine decodes one stream-json line.
func parseLine(b []byte) (line, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return line{}, err
	}
	if l.Type == "" {
		return line{}, errors.New("stream-json line without a type")
	}
	return l, nil
}

// blocks decodes a message's content blocks; a string content is one text
// block.
func (m *message) blocks() []block {
	if m == nil || len(m.Content) == 0 {
		return nil
	}
	var bs []block
	if err := json.Unmarshal(m.Content, &bs); err == nil {
		return bs
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return []block{{Type: "text", Text: s}}
	}
	return nil
}

// stream records a turn's stream-json lines in the turn. It is used by one
// goroutine at a time (the reader, then the turn once the reader is done).
type stream struct {
	t         *extturn.Turn
	ephemeral bool // one-shot: no session to record
	result    *line
	resultCh  chan struct{} // closed when the result line arrives
	msgUsage  map[string]usage
	msgOrder  []string
	malformed int
	firstBad  string
}

func newStream(t *extturn.Turn, ephemeral bool) *stream {
	return &stream{t: t, ephemeral: ephemeral, resultCh: make(chan struct{}), msgUsage: map[string]usage{}}
}

// maxLine bounds one stream-json line; a longer one is skipped.
const maxLine = 32 << 20

// read consumes r to EOF (or a read error), handling each line.
func (s *stream) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > maxLine {
				tooLong, buf = true, buf[:0]
				s.bad("a stream-json line longer than 32 MiB")
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !tooLong {
			s.handleBytes(buf)
		}
		buf, tooLong = buf[:0], false
		if err != nil {
			return
		}
	}
}

func (s *stream) bad(what string) {
	s.malformed++
	if s.firstBad == "" {
		s.firstBad = what
	}
}

func (s *stream) handleBytes(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	l, err := parseLine(b)
	if err != nil {
		s.bad(err.Error())
		return
	}
	s.handle(l)
}

// handle records one line: the session once the CLI names it, the agent's
// text as messages, its tool calls as notes, and the result.
func (s *stream) handle(l line) {
	if l.ParentToolUseID != nil && *l.ParentToolUseID != "" {
		return // a nested agent's words are not the child's own
	}
	switch l.Type {
	case "system":
		if l.Subtype == "init" && !s.ephemeral {
			s.t.SetSession(l.SessionID)
		}
	case "assistant":
		if l.Message == nil {
			return
		}
		if u := l.Message.Usage; u != nil && l.Message.ID != "" {
			if _, seen := s.msgUsage[l.Message.ID]; !seen {
				s.msgOrder = append(s.msgOrder, l.Message.ID)
			}
			s.msgUsage[l.Message.ID] = *u // the CLI repeats a message's usage on each of its lines
		}
		synthetic := (len(l.Error) > 0 && string(l.Error) != "null") || l.Message.Model == "<synthetic>"
		var text []string
		for _, b := range l.Message.blocks() {
			switch b.Type {
			case "text":
				if strings.TrimSpace(b.Text) != "" {
					text = append(text, b.Text)
				}
			case "tool_use":
				s.t.Note("tool_use: " + b.Name)
			}
		}
		if len(text) == 0 {
			return
		}
		if synthetic {
			s.t.Note("claude: " + truncate.Head(strings.Join(text, "\n"), 300))
			return
		}
		s.t.Message(strings.Join(text, "\n"))
	case "result":
		if s.result != nil {
			return
		}
		r := l
		s.result = &r
		if !s.ephemeral {
			s.t.SetSession(l.SessionID)
		}
		close(s.resultCh)
	}
}

// usage is the turn's usage: the result line's totals and cost, or, when
// the CLI died before writing it, the sum of the messages seen.
func (s *stream) usage() seam.Usage {
	if s.result != nil && s.result.Usage != nil {
		u := s.result.Usage.tokens()
		u.CostUSD = s.result.TotalCostUSD
		return u
	}
	var total seam.Usage
	for _, id := range s.msgOrder {
		total = total.Add(s.msgUsage[id].tokens())
	}
	if s.result != nil {
		total.CostUSD = s.result.TotalCostUSD
	}
	return total
}

// denials renders the result's permission denials, one per tool, counted.
func (s *stream) denials() []string {
	if s.result == nil {
		return nil
	}
	count := map[string]int{}
	var order []string
	for _, d := range s.result.PermissionDenials {
		name := d.ToolName
		if name == "" {
			name = "a tool"
		}
		if count[name] == 0 {
			order = append(order, name)
		}
		count[name]++
	}
	out := make([]string, 0, len(order))
	for _, n := range order {
		if c := count[n]; c > 1 {
			out = append(out, fmt.Sprintf("denied: %s (%d times)", n, c))
		} else {
			out = append(out, "denied: "+n)
		}
	}
	return out
}

// errorsText renders the result's "errors" field (strings or objects).
func errorsText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		return strings.Join(ss, "; ")
	}
	var objs []map[string]any
	if err := json.Unmarshal(raw, &objs); err == nil {
		var parts []string
		for _, o := range objs {
			if m, ok := o["message"].(string); ok {
				parts = append(parts, m)
				continue
			}
			b, _ := json.Marshal(o) // keys sorted

			parts = append(parts, string(b))
		}
		return strings.Join(parts, "; ")
	}
	return string(raw)
}
