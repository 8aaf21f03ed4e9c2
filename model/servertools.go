package model

import "slices"

// ServerTools are the builtin_tools names that stand for tools a model's
// provider runs itself, inside the call (Anthropic's server tools): the
// agent loop passes them in ModelRequest.ServerTools instead of running
// them. Each model of an agent that lists one must offer it
// (ServerToolModel).
var ServerTools = []string{"web_search", "web_fetch", "code_execution"}

// IsServerTool reports whether name is one of ServerTools.
func IsServerTool(name string) bool { return slices.Contains(ServerTools, name) }

// ServerToolModel is a model whose provider runs some of ServerTools.
type ServerToolModel interface {
	// ServerTools are the names of ServerTools the model offers.
	ServerTools() []string
}

// OffersServerTool reports whether m offers the server tool name.
func OffersServerTool(m any, name string) bool {
	st, ok := m.(ServerToolModel)
	return ok && slices.Contains(st.ServerTools(), name)
}
