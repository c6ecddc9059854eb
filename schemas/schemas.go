package schemas

import _ "embed"

// SubagentInput is the input schema of the subagent tool. Its provider
// property gets the registered providers as an enum when the tool is built.
//
//go:embed subagent.input.json
var SubagentInput []byte

// Inputs of the control tools.
var (
	//go:embed send_message.input.json
	SendMessageInput []byte
	//go:embed interrupt_agent.input.json
	InterruptAgentInput []byte
	//go:embed list_agents.input.json
	ListAgentsInput []byte
	//go:embed report.input.json
	ReportInput []byte
	// PermissionPromptInput is what Claude Code sends its permission-prompt
	// tool (seam.PromptTool); other fields it may add are let through.
	//
	//go:embed permission_prompt.input.json
	PermissionPromptInput []byte
)

// Config is the schema of the --config file.
//
//go:embed config.json
var Config []byte

// TasksWire is our transcription of the Tasks extension's wire shapes on
// protocol 2026-07-28 (one definition per message, under $defs), which
// the protocol tests check the tasks layer's answers against.
//
//go:embed tasks-2026-07-28.json
var TasksWire []byte
