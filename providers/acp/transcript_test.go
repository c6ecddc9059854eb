package acp

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// claude-code-acp's usage comes from Claude Code's transcript: only what a
// turn added, each assistant message once however many entries (content
// blocks) it was written as, cache tokens counted as input, found under
// CLAUDE_CONFIG_DIR (else HOME/.claude) in whatever project directory
// holds the session's file.
func TestTranscriptUsageCountsWhatTheTurnAdded(t *testing.T) {
	cfg := t.TempDir()
	const session = "0b6f4c56-5d1e-4a2c-9d7e-1f2a3b4c5d6e"
	dir := filepath.Join(cfg, "projects", "-tmp-some-project")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, session+".jsonl")
	appendLines := func(lines ...string) {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, l := range lines {
			if _, err := f.WriteString(l + "\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendLines(`{"type":"assistant","message":{"id":"msg_old","content":[{"type":"text","text":"earlier"}],"usage":{"input_tokens":1000,"output_tokens":1000}}}`)

	tr := &transcript{dir: transcriptDir([]string{"HOME=/nowhere", "CLAUDE_CONFIG_DIR=" + cfg}), session: session}
	tr.begin()
	appendLines(
		`{"type":"user","message":{"content":"do it"}}`,
		`{"type":"assistant","message":{"id":"msg_1","content":[{"type":"tool_use","name":"mcp__subagent__report"}],"usage":{"input_tokens":20,"output_tokens":5,"cache_read_input_tokens":3}}}`,
		`{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":20,"output_tokens":5,"cache_read_input_tokens":3}}}`,
		`not json`,
		`{"type":"assistant","message":{"id":"msg_2","content":[{"type":"text","text":"All \"done\" now, thanks"}],"usage":{"input_tokens":30,"output_tokens":7}}}`,
	)
	start := time.Now()
	got, ok := tr.usage(`All "done" now, thanks` + "\n[a warning the agent added]")
	if waited := time.Since(start); waited >= transcriptWait {
		t.Errorf("the turn's last message was in the transcript, yet usage waited %v", waited)
	}
	if want := (seam.Usage{InputTokens: 53, OutputTokens: 12}); !ok || got != want {
		t.Errorf("usage = %+v, %v; want %+v", got, ok, want)
	}

	// HOME/.claude without CLAUDE_CONFIG_DIR; no file: no usage.
	if d := transcriptDir([]string{"HOME=/h"}); d != filepath.Join("/h", ".claude", "projects") {
		t.Errorf("transcriptDir = %q", d)
	}
	none := &transcript{dir: filepath.Join(cfg, "projects"), session: "other"}
	none.begin()
	if _, ok := none.usage(""); ok {
		t.Error("a session with no transcript reported usage")
	}
}
