// Package e2e holds the built-binary end-to-end tests of mcp-subagent:
// TestMain builds the server (with -race when the tests are), and each
// test drives it as users do, through an MCP client, the CLI and the
// daemon, against fake models, real agent CLIs or a browser. Every test
// is behind a tier tag (e2e, realcli, browser; README.md, Testing); the
// in-process tests of package main's internals stay beside it.
package e2e
