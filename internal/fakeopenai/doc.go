// Package fakeopenai is a scriptable fake of an OpenAI-compatible
// chat-completions server, for tests only.
//
// It speaks the real wire format, so the code under test can use a real
// client (openai-go, or the mcp-subagent binary itself pointed at it with
// OPENAI_BASE_URL=[Server.URL]):
//
//   - POST /v1/chat/completions (and /chat/completions) takes the usual JSON
//     body. With "stream": true it answers text/event-stream: one
//     "data: {chat.completion.chunk}" frame per chunk, a usage chunk with empty
//     choices when stream_options.include_usage is true, then "data: [DONE]".
//     Without it, it answers one chat.completion object.
//   - GET /v1/models (and /models) lists the single model "fake-model".
//   - Errors are an HTTP status with {"error":{"message","type","param","code"}}.
//
// A [Handler] decides each answer from the 0-based index of the chat request
// and its decoded body; [Script] replays a fixed list of replies. Every chat
// request is recorded before its handler runs, so [Server.Requests] shows what
// the client sent, including requests whose answer was an error.
//
// Streamed answers are split the way real servers split them: a role chunk,
// the text in a few content chunks, each tool call as a header chunk (index,
// id, type, name) followed by its arguments in pieces, and a final chunk with
// an empty delta and the finish_reason. Tool calls without an ID get
// "call_<n>_<i>" (request index n, call index i).
//
// A Server is safe for concurrent use; handlers may be called concurrently.
package fakeopenai
