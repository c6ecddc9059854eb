package persist

import (
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// An index record keeps the model a listing row shows, with or without a
// cwd before it; a record written before either field existed still
// decodes, with both empty.
func TestIndexRecordKeepsTheModel(t *testing.T) {
	base := seam.Header{Depth: 1, Mode: seam.ModeContinuable, Provider: "spawn", Label: "l",
		CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	for _, c := range []struct{ cwd, model string }{{"", ""}, {"/w", ""}, {"", "fast"}, {"/w", "fast"}} {
		h := base
		h.Cwd, h.Model = c.cwd, c.model
		r, err := decodeIndexRecord(encodeIndexRecord(h, nil))
		if err != nil || r.cwd != c.cwd || r.model != c.model || r.label != "l" {
			t.Errorf("cwd %q model %q: decoded %+v, %v", c.cwd, c.model, r, err)
		}
	}
	// A worktree follows the model, empty or not.
	for _, model := range []string{"", "fast"} {
		h := base
		h.Model = model
		h.Worktree = &seam.Worktree{Path: "/d/wt/agent-1", Branch: "subagent/agent-1", Base: "0123abcd", Repo: "/r"}
		r, err := decodeIndexRecord(encodeIndexRecord(h, nil))
		if err != nil || r.model != model || r.wtPath != h.Worktree.Path || r.wtBranch != h.Worktree.Branch || r.wtBase != h.Worktree.Base || r.wtRepo != h.Worktree.Repo {
			t.Errorf("worktree with model %q: decoded %+v, %v", model, r, err)
		}
	}
	// cwd present but empty with nothing after it has another encoding (none).
	b := appendString(encodeIndexRecord(base, nil), "")
	if _, err := decodeIndexRecord(b); err == nil {
		t.Error("an empty trailing cwd decoded; it must have one encoding")
	}
}
