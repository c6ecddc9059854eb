package acp

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// claude-code-acp 0.16.2 reports no token usage over ACP at all, but the
// Claude Code it runs keeps each session's transcript, every assistant
// message with its API usage, at
// <CLAUDE_CONFIG_DIR or $HOME/.claude>/projects/<cwd, sanitized>/<session id>.jsonl
// (the ACP session id is Claude Code's). A turn's usage is what the
// transcript gained during the turn.

// transcriptWait bounds the wait for the transcript to hold the turn's
// last message: Claude Code writes it in batches every 100 ms, possibly
// after it has answered the prompt.
const transcriptWait = 3 * time.Second

// transcriptDir is the directory holding Claude Code's project
// transcripts for an agent with environment env.
func transcriptDir(env []string) string {
	get := func(name string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, name+"="); ok {
				return v
			}
		}
		return ""
	}
	if d := get("CLAUDE_CONFIG_DIR"); d != "" {
		return filepath.Join(d, "projects")
	}
	if h := get("HOME"); h != "" {
		return filepath.Join(h, ".claude", "projects")
	}
	return ""
}

// transcript follows one session's transcript file.
type transcript struct {
	dir     string // transcriptDir
	session string
	offset  int64 // where the current turn's entries start
}

// path finds the session's file; the project directory's name is Claude
// Code's business (a sanitized cwd, shortened when long), so any
// directory holding <session>.jsonl will do: session ids are UUIDs.
func (tr *transcript) path() string {
	m, _ := filepath.Glob(filepath.Join(tr.dir, "*", tr.session+".jsonl"))
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// begin marks the start of a turn: what the file holds now is earlier.
func (tr *transcript) begin() {
	tr.offset = 0
	if p := tr.path(); p != "" {
		if fi, err := os.Stat(p); err == nil {
			tr.offset = fi.Size()
		}
	}
}

// usage is the turn's usage: the sum over the assistant messages written
// since begin (each message once: Claude Code writes one entry per content
// block, all with the message's usage). It waits, up to transcriptWait,
// until an assistant entry holding the start of final (the turn's last
// message) is written; with final empty it reads what is there.
func (tr *transcript) usage(final string) (seam.Usage, bool) {
	deadline := time.Now().Add(transcriptWait)
	for {
		u, sawFinal, ok := tr.read(final)
		if sawFinal || final == "" || time.Now().After(deadline) {
			return u, ok
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type transcriptEntry struct {
	Type    string `json:"type"`
	Message struct {
		ID      string          `json:"id"`
		Content json.RawMessage `json:"content"`
		Usage   *struct {
			InputTokens              int64 `json:"input_tokens"`
			OutputTokens             int64 `json:"output_tokens"`
			CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
			CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		} `json:"usage"`
	} `json:"message"`
}

func (tr *transcript) read(final string) (u seam.Usage, sawFinal, ok bool) {
	p := tr.path()
	if p == "" {
		return u, false, false
	}
	f, err := os.Open(p)
	if err != nil {
		return u, false, false
	}
	defer f.Close()
	if _, err := f.Seek(tr.offset, io.SeekStart); err != nil {
		return u, false, false
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e transcriptEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Type != "assistant" {
			continue
		}
		if final != "" && strings.Contains(string(e.Message.Content), jsonText(head(final))) {
			sawFinal = true
		}
		if e.Message.Usage == nil || seen[e.Message.ID] {
			continue
		}
		seen[e.Message.ID] = true
		mu := e.Message.Usage
		u = u.Add(seam.Usage{InputTokens: mu.InputTokens + mu.CacheCreationInputTokens + mu.CacheReadInputTokens, OutputTokens: mu.OutputTokens})
		ok = true
	}
	return u, sawFinal, ok
}

// head is the start of a turn's last message, its first line cut to 32
// characters: what the transcript's entry must hold (an agent may append
// text of its own).
func head(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	r := []rune(line)
	return string(r[:min(len(r), 32)])
}

// jsonText is s as it appears inside a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
