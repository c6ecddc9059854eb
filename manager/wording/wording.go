// Package wording owns the wording of what the runtime tells a parent
// about a child: how an epoch ended (Settled, with the worktree's part
// from package worktrees) and a child's report (Report). A question's
// notice is package questions' (Text). The words are the runtime's, sent
// with a source kind of their own, so they never pass for anyone's.
package wording

import (
	"fmt"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
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
	s += worktrees.NoticeText(last)
	if strings.TrimSpace(last.Output) != "" {
		return s + "\nIts closing message:\n" + last.Output
	}
	return s + "\nIt left no closing message."
}

// Report is how child id's report reads to its parent.
func Report(id, content string) string {
	return fmt.Sprintf("Background subagent %s reported:\n%s", id, content)
}
