package edge

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// Unit tests of the layer's reading and rewriting of JSON-RPC messages,
// below Handle: which requests a task may answer, how ids are kept apart,
// and what a call looks like when it reaches the MCP server.

func parse(t *testing.T, raw string) request {
	t.Helper()
	var r request
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

const declared = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

func TestOnlyADeclaringSubagentOrSendMessageCallIsTaskable(t *testing.T) {
	cases := []struct {
		name, raw string
		want      bool
	}{
		{"subagent, declared", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent",` + declared + `}}`, true},
		{"send_message, declared", `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"send_message",` + declared + `}}`, true},
		{"another tool, declared", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_agents",` + declared + `}}`, false},
		{"subagent, not declared", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent"}}`, false},
		{"subagent, the extension not an object", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}}}`, false},
		{"subagent, another extension", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"x/other":{}}}}}}`, false},
		{"not a tool call", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"subagent",` + declared + `}}`, false},
	}
	for _, c := range cases {
		if got := parse(t, c.raw).taskable(); got != c.want {
			t.Errorf("%s: taskable = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestANotificationIsNotARequest(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":0,"method":"ping"}`:                         true,
		`{"jsonrpc":"2.0","id":"x","method":"ping"}`:                       true,
		`{"jsonrpc":"2.0","method":"notifications/cancelled"}`:             false,
		`{"jsonrpc":"2.0","id":null,"method":"notifications/initialized"}`: false,
	} {
		if got := parse(t, raw).isRequest(); got != want {
			t.Errorf("%s: isRequest = %v, want %v", raw, got, want)
		}
	}
}

// The string "1" and the number 1 are different requests; 1 and 1.0 the
// same one.
func TestRequestIDsKeyByTypeAndValue(t *testing.T) {
	if idKey(json.RawMessage(`"1"`)) == idKey(json.RawMessage(`1`)) {
		t.Error(`the ids "1" and 1 share a key`)
	}
	if idKey(json.RawMessage(`1`)) != idKey(json.RawMessage(`1.0`)) {
		t.Error("the ids 1 and 1.0 have different keys")
	}
	if a, b := newCallID(), newCallID(); a == b || !strings.HasPrefix(a, "tasks-layer-call-") {
		t.Errorf("call ids %q, %q: want distinct ids of the layer's own", a, b)
	}
}

// A call reaches the MCP server under the layer's id, in task mode and
// without its progress token; everything else it carried is kept.
func TestTheInnerCallHasTheLayersIDAndNoProgressToken(t *testing.T) {
	raw := json.RawMessage(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"subagent","arguments":{"prompt":"p"},"_meta":{"progressToken":"tok","other":1}}}`)
	var got struct {
		ID     string `json:"id"`
		Params struct {
			Name      string            `json:"name"`
			Arguments map[string]string `json:"arguments"`
			Meta      map[string]any    `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(innerCall(raw, "inner-1"), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "inner-1" || got.Params.Name != "subagent" || got.Params.Arguments["prompt"] != "p" {
		t.Errorf("inner call = %+v", got)
	}
	if got.Params.Meta[taskCallMeta] != "inner-1" {
		t.Errorf("inner call's _meta = %v, want it in task mode (%s: inner-1)", got.Params.Meta, taskCallMeta)
	}
	if _, ok := got.Params.Meta["progressToken"]; ok || got.Params.Meta["other"] != float64(1) {
		t.Errorf("inner call's _meta = %v, want the progress token gone and the rest kept", got.Params.Meta)
	}
	if bad := json.RawMessage(`not json`); string(innerCall(bad, "x")) != "not json" {
		t.Error("a message that is not JSON is not passed on unchanged")
	}
}

// The answer goes back under the client's id whichever form the server
// answered in.
func TestTheAnswerCarriesTheClientsID(t *testing.T) {
	client := mcp.NewRequestId("client-7")
	inner := mcp.NewRequestId("tasks-layer-call-x")
	for _, resp := range []mcp.JSONRPCMessage{
		mcp.JSONRPCResponse{ID: inner},
		&mcp.JSONRPCResponse{ID: inner},
		mcp.JSONRPCError{ID: inner},
		&mcp.JSONRPCError{ID: inner},
	} {
		b, err := json.Marshal(withID(resp, client))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"id":"client-7"`) {
			t.Errorf("%T answered as %s", resp, b)
		}
	}
}

func TestACompleteResultKeepsTheToolResultAndSaysComplete(t *testing.T) {
	raw, err := completeResult(mcp.NewToolResultError("it failed"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m["resultType"] != "complete" || m["isError"] != true || !strings.Contains(string(raw), "it failed") {
		t.Errorf("complete result = %s", raw)
	}
	if !isErrorResult(raw) || isErrorResult(json.RawMessage(`{"content":[]}`)) || isErrorResult(json.RawMessage(`nope`)) {
		t.Error("isErrorResult misreads isError")
	}
}

// The TTL counts from creation: a working task lives at least TTL from
// now, a settled one until TTL after it settled.
func TestTheTTLCountsFromCreation(t *testing.T) {
	created := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := created.Add(90 * time.Second)
	l := &TaskLayer{now: func() time.Time { return now }}
	working := taskstore.Record{CreatedAt: created, TTL: time.Minute}
	if got, want := l.ttlMs(working), int64(150_000); got != want {
		t.Errorf("working task's ttl = %d ms, want %d", got, want)
	}
	settled := working
	settled.SettledAt = created.Add(30 * time.Second)
	if got, want := l.ttlMs(settled), int64(90_000); got != want {
		t.Errorf("settled task's ttl = %d ms, want %d", got, want)
	}
}
