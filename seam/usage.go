package seam

// Usage counts the tokens of one or more model calls, and what they cost
// where the agent reports it (external CLIs do; the chat API does not).
//
// It has llm.Usage's fields and JSON, field for field, so the two convert
// with a plain conversion (seam.Usage(u), llm.Usage(u)) where a model's
// answer enters the journal (package agent). seam keeps a type of its own
// rather than importing llm's so that it imports nothing of this module.
type Usage struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens, CostUSD: u.CostUSD + v.CostUSD}
}

// Effort is the reasoning effort a child's model is asked for: one of
// llm.Effort's values (low, medium, high), empty for the model's default.
// It converts to and from llm.Effort; the manager checks it (validate).
type Effort string

// Worktree is a child's own git worktree as its Header records it. It has
// worktree.Info's fields and JSON, field for field, so the two convert
// (seam.Worktree(i), worktree.Info(w)) where the worktree policy
// (manager/worktrees) calls package worktree.
type Worktree struct {
	Path   string `json:"path"`   // the worktree's top directory
	Branch string `json:"branch"` // e.g. subagent/agent-1a2b...
	Base   string `json:"base"`   // the commit it was created from
	// Repo is the top directory of the work tree the worktree was made
	// from: git's worktree commands run there.
	Repo string `json:"repo"`
}

// Changes is what a worktree's branch holds beyond its base (a Result's):
// worktree.Changes' fields and JSON, field for field, converting as
// Worktree does. Each list is clipped; Omitted counts the paths left out.
type Changes struct {
	Added    []string `json:"added,omitempty"`
	Modified []string `json:"modified,omitempty"`
	Deleted  []string `json:"deleted,omitempty"`
	Diffstat string   `json:"diffstat,omitempty"`
	Omitted  int      `json:"omitted,omitempty"`
}

// Empty reports whether the branch holds nothing beyond its base.
func (c Changes) Empty() bool {
	return len(c.Added) == 0 && len(c.Modified) == 0 && len(c.Deleted) == 0 && c.Omitted == 0
}
