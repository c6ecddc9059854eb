package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// WireVersion is the version of the journal event format this build
// writes. A version-1 record carries no "v" field: that is the format
// every earlier build wrote, byte for byte, so earlier builds read what
// this one writes. A later, incompatible format writes "v" with its
// number; a change that only adds fields keeps the version, because
// readers ignore fields they do not know.
const WireVersion = 1

// wireEvent is a journal event as stored. Its fields, names and order are
// the file format; they are spelled out here rather than borrowed from
// seam's types so that a change to the record types cannot change what is
// on disk.
type wireEvent struct {
	V          *int         `json:"v,omitempty"` // absent: version 1
	Seq        int64        `json:"seq"`
	Kind       string       `json:"kind"`
	Time       time.Time    `json:"time"`
	Turn       int          `json:"turn,omitempty"`
	Message    *wireMessage `json:"message,omitempty"`
	Source     string       `json:"source,omitempty"`
	Usage      *wireUsage   `json:"usage,omitempty"`
	StopReason string       `json:"stop_reason,omitempty"`
	Diagnostic string       `json:"diagnostic,omitempty"`
	Session    string       `json:"session,omitempty"`
	Grant      *wireGrant   `json:"grant,omitempty"`
}

// wireGrant is a budget event's grant. The kind was added within version
// 1: a build that does not know it folds the record to EventUnknown.
type wireGrant struct {
	Tokens  int64   `json:"tokens,omitempty"`
	Steps   int     `json:"steps,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	CostUSD float64 `json:"cost_usd,omitempty"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    string         `json:"content,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Refusal    string         `json:"refusal,omitempty"`
}

type wireToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireUsage struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
}

// wireEnvelope is the part of a record every version shares: what a
// record this build cannot read is folded from.
type wireEnvelope struct {
	V    *int            `json:"v"`
	Seq  int64           `json:"seq"`
	Kind string          `json:"kind"`
	Time json.RawMessage `json:"time"`
}

// EncodeEvent returns e as one stored journal record (version 1: no "v"
// field). The sentinel EventUnknown is written as its sequence, kind and
// time alone.
func EncodeEvent(e Event) ([]byte, error) {
	w := wireEvent{Seq: e.Seq, Kind: string(e.Kind), Time: e.Time}
	if e.Kind != EventUnknown {
		w.Turn, w.Source, w.Session = e.Turn, e.Source, e.Session
		w.StopReason, w.Diagnostic = string(e.StopReason), e.Diagnostic
		if m := e.Message; m != nil {
			w.Message = &wireMessage{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID, Refusal: m.Refusal}
			// A conversion, so that a field added to seam.ToolCall fails
			// to compile here instead of silently missing from the file.
			for _, c := range m.ToolCalls {
				w.Message.ToolCalls = append(w.Message.ToolCalls, wireToolCall(c))
			}
		}
		if u := e.Usage; u != nil {
			w.Usage = &wireUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: u.CostUSD}
		}
		if g := e.Grant; g != nil {
			w.Grant = (*wireGrant)(g)
		}
	}
	return json.Marshal(w)
}

// DecodeEvent reads one stored journal record. It never panics, and it
// fails only for bytes that are not a record: anything but exactly one JSON
// object, a record without a kind or with a negative sequence, and a
// version-1 record of a known kind whose fields do not decode (its time
// included).
//
// It is tolerant otherwise. Unknown fields are ignored. A record of a kind
// this build does not know, or of a version other than 1 (a later build's
// format, which this build will not half-read), folds to the sentinel
// EventUnknown, keeping its sequence number and, where it reads, its time;
// everything else it held is dropped.
func DecodeEvent(b []byte) (Event, error) {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return Event{}, errors.New("a journal record must be a JSON object")
	}
	var w wireEvent
	err := json.Unmarshal(b, &w)
	if err == nil {
		if e, ok, ferr := fold(w.V, w.Seq, w.Kind, func() time.Time { return w.Time }); ok || ferr != nil {
			return e, ferr
		}
	} else {
		// The fields do not read as version 1. A record of another version
		// or kind may still fold, if its envelope reads.
		var env wireEnvelope
		if json.Unmarshal(b, &env) != nil {
			return Event{}, err
		}
		e, ok, ferr := fold(env.V, env.Seq, env.Kind, func() time.Time {
			// A later version may write time differently; the sentinel
			// keeps it only when it reads.
			var t time.Time
			if json.Unmarshal(env.Time, &t) != nil {
				return time.Time{}
			}
			return t
		})
		if ok || ferr != nil {
			return e, ferr
		}
		return Event{}, err
	}
	e := Event{Seq: w.Seq, Kind: EventKind(w.Kind), Time: w.Time, Turn: w.Turn, Source: w.Source,
		StopReason: StopReason(w.StopReason), Diagnostic: w.Diagnostic, Session: w.Session}
	if m := w.Message; m != nil {
		e.Message = &seam.Message{Role: seam.Role(m.Role), Content: m.Content, ToolCallID: m.ToolCallID, Refusal: m.Refusal}
		for _, c := range m.ToolCalls {
			e.Message.ToolCalls = append(e.Message.ToolCalls, seam.ToolCall(c))
		}
	}
	if u := w.Usage; u != nil {
		e.Usage = &seam.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: u.CostUSD}
	}
	if g := w.Grant; g != nil {
		e.Grant = (*Grant)(g)
	}
	return e, nil
}

// fold checks a record's envelope. It fails a record without a kind or
// with a negative sequence, and folds one of another version or of a kind
// without a known body to the sentinel (ok); otherwise the record is read
// as version 1.
func fold(v *int, seq int64, kind string, at func() time.Time) (e Event, ok bool, err error) {
	switch {
	case kind == "":
		return Event{}, false, errors.New("journal record has no kind")
	case seq < 0:
		return Event{}, false, fmt.Errorf("journal record has negative sequence %d", seq)
	case (v != nil && *v != WireVersion) || !hasBody(EventKind(kind)):
		return Event{Seq: seq, Kind: EventUnknown, Time: at()}, true, nil
	}
	return Event{}, false, nil
}

// hasBody reports whether k is a kind this build reads the fields of.
func hasBody(k EventKind) bool {
	switch k {
	case EventTurnStart, EventMessage, EventTurnEnd, EventSession, EventBudget:
		return true
	}
	return false
}
