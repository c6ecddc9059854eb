// Package wording owns the wording of what the runtime tells a parent
// about a child: how an epoch ended (Settled, with where its worktree's
// changes are; Unreadable when its journal cannot be read) and a child's
// report (Report). A question's notice is package questions' (Text). The
// words are the runtime's, sent with a source kind of their own, so they
// never pass for anyone's.
package wording

import (
	"fmt"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Settled is the runtime's statement of how child id's epoch ended, last
// being its last turn's result.
func Settled(id string, last seam.Result) string {
	var how string
	switch last.StopReason {
	case agent.StopCompleted:
		how = "finished and will do no further work unless you send it more."
	case agent.StopAborted:
		how = "was stopped before it finished."
	case agent.StopMaxTokens:
		how = "ran out of room before it finished."
	case agent.StopRefusal:
		how = "declined the task."
	case agent.StopBudget:
		how = "ran out of its budget before it finished; send it a message with a new budget to let it go on."
	default:
		how = "failed before it finished."
	}
	s := fmt.Sprintf("Background subagent %s %s", id, how)
	// A completed turn's diagnostic says what was refused along the way
	// (a permission denied or declined): the parent must hear it, not
	// only the transcript.
	if last.Diagnostic != "" {
		s += " Diagnostic: " + last.Diagnostic
	}
	s += worktreeText(last)
	if strings.TrimSpace(last.Output) != "" {
		return s + "\nIts closing message:\n" + last.Output
	}
	return s + "\nIt left no closing message."
}

// Report is how child id's report reads to its parent.
func Report(id, content string) string {
	return fmt.Sprintf("Background subagent %s reported:\n%s", id, content)
}

// Unreadable is the notice about child id, left resident, whose journal
// cannot be read (err).
func Unreadable(id string, err error) string {
	return fmt.Sprintf("Background subagent %s cannot be read from the session store, so how its last run ended is unknown (%s). "+
		"It lists as corrupt; stop the server and run `mcp-subagent doctor` to copy every readable child into a fresh store.",
		id, truncate.Bound(err.Error(), 300))
}

// worktreeText is what a settlement notice says of the child's worktree.
func worktreeText(last seam.Result) string {
	w, c := last.Worktree, last.Changes
	if w == nil {
		return ""
	}
	if c == nil {
		return fmt.Sprintf("\nIts worktree: %s on branch %s (base %s).", w.Path, w.Branch, w.Base)
	}
	if c.Empty() {
		return fmt.Sprintf("\nIt changed nothing in its worktree, which is removed (a message to it recreates it on branch %s).", w.Branch)
	}
	s := fmt.Sprintf("\nIts changes are committed on branch %s in worktree %s (base %s): %s.", w.Branch, w.Path, w.Base, c.Diffstat)
	for _, l := range []struct {
		name  string
		paths []string
	}{{"added", c.Added}, {"modified", c.Modified}, {"deleted", c.Deleted}} {
		if len(l.paths) > 0 {
			s += fmt.Sprintf(" %s: %s.", strings.ToUpper(l.name[:1])+l.name[1:], strings.Join(l.paths, ", "))
		}
	}
	return s
}
