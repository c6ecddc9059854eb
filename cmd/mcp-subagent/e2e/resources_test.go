//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

// Transcripts are MCP resources: the template is listed, the caller's
// children are listed and readable, a subscription gets
// notifications/resources/updated while the child runs; another
// principal neither lists nor reads them.
func TestTranscriptResources(t *testing.T) {
	hold, holding := make(chan struct{}), make(chan struct{})
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if n == 0 {
			close(holding)
			<-hold
			return fakeopenai.Reply{Text: "the watched answer"}
		}
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText()}
	})
	released := false
	defer func() {
		if !released {
			close(hold)
		}
		fake.Close()
	}()
	alice, bob := aliceAndBob(t, fake)
	ctx := testCtx(t)

	h, _ := startBackground(t, alice, ctx, "watched work", "watch me")
	<-holding
	uri := edge.TranscriptURI(h.AgentID)

	tpls, err := alice.client.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
	if err != nil || len(tpls.ResourceTemplates) != 1 || tpls.ResourceTemplates[0].URITemplate.Raw() != edge.TranscriptTemplate {
		t.Fatalf("resources/templates/list = %+v, %v", tpls, err)
	}
	list, err := alice.client.ListResources(ctx, mcp.ListResourcesRequest{})
	if err != nil || len(list.Resources) != 1 || list.Resources[0].URI != uri || list.Resources[0].Name != "watched work" {
		t.Fatalf("alice's resources/list = %+v, %v; want her child's transcript", list, err)
	}
	tr, err := readTranscriptOn(ctx, alice, h.AgentID)
	if err != nil || tr.ID != h.AgentID || tr.Status != "running" || len(tr.Entries) < 3 {
		t.Fatalf("alice's read = %+v, %v", tr, err)
	}
	if e := tr.Entries[2]; e.Role != "user" || e.Source != "user" || e.Text != "watch me" { // after the budget grant and the turn start
		t.Errorf("the prompt entry = %+v", e)
	}
	for _, e := range tr.Entries {
		if strings.Contains(e.Text, "the watched answer") {
			t.Fatalf("the answer is in the transcript before the model gave it: %+v", tr)
		}
	}

	// Bob: not listed, not readable.
	if bl, err := bob.client.ListResources(ctx, mcp.ListResourcesRequest{}); err != nil || len(bl.Resources) != 0 {
		t.Errorf("bob's resources/list = %+v, %v; want none", bl, err)
	}
	if _, err := readTranscriptOn(ctx, bob, h.AgentID); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Errorf("bob's read of alice's child: %v, want UNAUTHORIZED", err)
	}

	// Subscribed, then released: updates come while the child runs, and
	// the transcript read after them holds the answer.
	sub := mcp.SubscribeRequest{}
	sub.Params.URI = uri
	//lint:ignore SA1019 the legacy-era subscription real clients use
	if err := alice.client.Subscribe(ctx, sub); err != nil {
		t.Fatal(err)
	}
	close(hold)
	released = true
	deadline := time.After(20 * time.Second)
	for {
		select {
		case n := <-alice.notes:
			if n.Method != mcp.MethodNotificationResourceUpdated {
				continue
			}
			if got, _ := n.Params.AdditionalFields["uri"].(string); got != uri {
				t.Fatalf("an update for %q, want %q", got, uri)
			}
		case <-deadline:
			t.Fatalf("no update brought the answer; last read %+v", tr)
		}
		if tr, err = readTranscriptOn(ctx, alice, h.AgentID); err != nil {
			t.Fatal(err)
		}
		if tr.Len >= 4 && tr.Entries[3].Role == "assistant" && tr.Entries[3].Text == "the watched answer" {
			break
		}
	}
}

// resources/list pages the caller's transcripts: following nextCursor
// lists each of more children than one page holds exactly once, in pages
// of at most manager.MaxPageLimit; mcp-go's ListResources, which follows
// the cursors itself, gets them all.
func TestTranscriptResourcesPage(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	const n = 2*manager.MaxPageLimit + 50
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() { // reports with t.Error: no t.Fatal off the test's goroutine
			for i := w; i < n; i += 8 {
				req := mcp.CallToolRequest{}
				req.Params.Name = "subagent"
				req.Params.Arguments = map[string]any{"description": fmt.Sprintf("child %d", i), "prompt": "go"}
				res, err := s.client.CallTool(ctx, req)
				if err != nil || res.IsError {
					t.Errorf("delegation %d: %v %v", i, err, res)
					return
				}
				var sc struct {
					AgentID string `json:"agent_id"`
				}
				raw := []byte(res.RawStructuredContent)
				if raw == nil {
					raw, _ = json.Marshal(res.StructuredContent)
				}
				if err := json.Unmarshal(raw, &sc); err != nil || sc.AgentID == "" {
					t.Errorf("delegation %d: structuredContent %s: %v", i, raw, err)
					return
				}
				ids <- sc.AgentID
			}
		})
	}
	wg.Wait()
	close(ids)
	want := map[string]bool{}
	for id := range ids {
		want[edge.TranscriptURI(id)] = true
	}
	if len(want) != n {
		t.Fatalf("%d distinct children, want %d", len(want), n)
	}
	seen := map[string]int{}
	var cursor mcp.Cursor
	pages := 0
	for {
		req := mcp.ListResourcesRequest{}
		req.Params.Cursor = cursor
		list, err := s.client.ListResourcesByPage(ctx, req)
		if err != nil {
			t.Fatalf("resources/list page %d: %v", pages, err)
		}
		pages++
		if len(list.Resources) > manager.MaxPageLimit {
			t.Errorf("page %d holds %d resources, more than %d", pages, len(list.Resources), manager.MaxPageLimit)
		}
		for _, r := range list.Resources {
			seen[r.URI]++
		}
		if cursor = list.NextCursor; cursor == "" {
			break
		}
		if pages > n {
			t.Fatal("the cursors never end")
		}
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	for uri := range want {
		if seen[uri] != 1 {
			t.Errorf("%s listed %d times", uri, seen[uri])
		}
	}
	if len(seen) != n {
		t.Errorf("%d resources listed, want %d", len(seen), n)
	}
	if all, err := s.client.ListResources(ctx, mcp.ListResourcesRequest{}); err != nil || len(all.Resources) != n {
		t.Errorf("ListResources over every page: %d resources, %v; want %d", len(all.Resources), err, n)
	}
	// A cursor that is not a listing's lists nothing (and fails nothing).
	req := mcp.ListResourcesRequest{}
	req.Params.Cursor = "bm90LWEtY3Vyc29y"
	if list, err := s.client.ListResourcesByPage(ctx, req); err != nil || len(list.Resources) != 0 {
		t.Errorf("a foreign cursor: %d resources, %v", len(list.Resources), err)
	}
}
