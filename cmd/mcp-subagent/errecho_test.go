//go:build e2e

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// rpcError is a JSON-RPC answer's error.
type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// readOverHTTP reads uri with resources/read over g's --http, bearer tok.
func readOverHTTP(t *testing.T, g *guarded, tok, uri string) rpcErr {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": map[string]any{"uri": uri}})
	req, _ := http.NewRequest(http.MethodPost, g.base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out struct {
		Error rpcErr `json:"error"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("resources/read answered %d %q", res.StatusCode, b)
	}
	return out.Error
}

// readOverStdio reads uri with resources/read as principal p through the
// stdio sessions' intercept.
func readOverStdio(g *guarded, p, uri string) rpcErr {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": map[string]any{"uri": uri}})
	resp := g.intercept()(edge.WithPrincipal(g.ctx, p), body, g.ms.HandleMessage)
	b, _ := json.Marshal(resp)
	var out struct {
		Error rpcErr `json:"error"`
	}
	_ = json.Unmarshal(b, &out)
	return out.Error
}

// A transcript resource that does not exist, or is not the caller's, and
// a URI of no resource are -32002 (resource not found, as the MCP
// specification says); a transcript URI whose id no id could be is -32602
// (invalid params): never -32603, the server's own failure. Over stdio and
// HTTP. And a 100 KB URI comes back in no error whole.
func TestResourceReadErrorsHaveTheirCodes(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	g := newGuarded(t, fake, insecureHooks{})
	id := g.localChild(t, "work")
	huge := edge.TranscriptURI(strings.Repeat("x", 100<<10))
	for _, tc := range []struct {
		name, principal, uri string
		code                 int
	}{
		{"an unknown child", "local", edge.TranscriptURI("agent-0000000000000000"), mcp.RESOURCE_NOT_FOUND},
		{"another principal's child", "mallory", edge.TranscriptURI(id), mcp.RESOURCE_NOT_FOUND},
		{"a URI of no resource", "local", "subagent://agents/" + id, mcp.RESOURCE_NOT_FOUND},
		{"a 100 KB id", "local", huge, mcp.INVALID_PARAMS},
		{"a 100 KB URI of no resource", "local", huge + "x", mcp.RESOURCE_NOT_FOUND},
		{"a transcript URI with a path in its id", "local", edge.TranscriptURI("a/b"), mcp.RESOURCE_NOT_FOUND},
	} {
		got := map[string]rpcErr{"stdio": readOverStdio(g, tc.principal, tc.uri)}
		if tc.principal == "local" {
			got["http"] = readOverHTTP(t, g, g.token, tc.uri)
		}
		for tr, e := range got {
			if e.Code != tc.code || len(e.Message) > 1024 || e.Message == "" {
				t.Errorf("%s over %s: code %d, message of %d bytes %q; want code %d and a message under 1 KiB",
					tc.name, tr, e.Code, len(e.Message), e.Message[:min(len(e.Message), 300)], tc.code)
			}
		}
	}
	if e := readOverStdio(g, "local", edge.TranscriptURI(id)); e.Code != 0 {
		t.Errorf("reading local's own child: %+v", e)
	}
}

// A 1 MiB id to the worktree-rm admin operation (the socket takes it; argv
// could not) comes back in no error whole (the CLI's side is e2e's
// TestOverlongIDsAreNotEchoedByTheCLI).
func TestOverlongIDsAreNotEchoed(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	g := newGuarded(t, fake, insecureHooks{})
	args, _ := json.Marshal(worktreeRmArgs{ID: strings.Repeat("w", 1<<20)})
	_, err := g.admin(context.Background(), daemon.AdminRequest{Op: daemon.OpWorktreeRm, Principal: "local", Args: args})
	if err == nil || len(err.Error()) > 1024 || !strings.Contains(err.Error(), `field "id"`) {
		t.Errorf("worktree-rm of a 1 MiB id: %d bytes of error; want a short INVALID_REQUEST naming the field", len(fmt.Sprint(err)))
	}
}
