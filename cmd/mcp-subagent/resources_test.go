package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/tools"
)

// readTranscriptOn reads a transcript resource with s's client.
func readTranscriptOn(ctx context.Context, s *instance, id string) (manager.Transcript, error) {
	req := mcp.ReadResourceRequest{}
	req.Params.URI = tools.TranscriptURI(id)
	res, err := s.client.ReadResource(ctx, req)
	if err != nil {
		return manager.Transcript{}, err
	}
	var t manager.Transcript
	if len(res.Contents) != 1 {
		return t, nil
	}
	tc, _ := res.Contents[0].(mcp.TextResourceContents)
	if tc.MIMEType != "application/json" {
		return t, nil
	}
	err = json.Unmarshal([]byte(tc.Text), &t)
	return t, err
}

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
	uri := tools.TranscriptURI(h.AgentID)

	tpls, err := alice.client.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
	if err != nil || len(tpls.ResourceTemplates) != 1 || tpls.ResourceTemplates[0].URITemplate.Raw() != tools.TranscriptTemplate {
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
