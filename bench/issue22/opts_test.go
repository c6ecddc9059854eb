package issue22

import "github.com/mcp-subagent/mcp-subagent/view"

// viewOptions lets 50 streams of one principal in (the default cap is
// lower), so the sharing is what is measured.
func viewOptions() view.Options { return view.Options{MaxStreams: 64} }
