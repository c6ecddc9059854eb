package manager

import (
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// newErr is a seam error of code with a formatted message.
func newErr(code seam.Code, format string, args ...any) *seam.Error {
	return &seam.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
