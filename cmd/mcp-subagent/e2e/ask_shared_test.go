//go:build e2e || realcli

package e2e

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

var questionID = regexp.MustCompile(`question (q-[0-9a-f]+)`)

// waitNoticeWithin is waitNotice with its own bound.
func waitNoticeWithin(t *testing.T, s *instance, source string, d time.Duration) string {
	t.Helper()
	var all strings.Builder
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		got := text(s.call(t, testCtx(t), "list_agents", map[string]any{"wait_seconds": 20}))
		all.WriteString(got + "\n")
		if strings.Contains(got, "["+source+" from ") {
			return got
		}
	}
	t.Fatalf("no %s notice arrived; saw:\n%s\nstderr:\n%s", source, all.String(), s.stderr)
	return ""
}

func transcriptJSON(t *testing.T, s *instance, id string) string {
	t.Helper()
	tr, err := readTranscriptOn(testCtx(t), s, id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tr)
	return string(b)
}

// readTranscriptOn reads a transcript resource with s's client.
func readTranscriptOn(ctx context.Context, s *instance, id string) (manager.Transcript, error) {
	req := mcp.ReadResourceRequest{}
	req.Params.URI = edge.TranscriptURI(id)
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
