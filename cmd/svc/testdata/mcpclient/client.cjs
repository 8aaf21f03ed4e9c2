// A client of `svc mcp` written with the TypeScript MCP SDK
// (@modelcontextprotocol/sdk, the directory of its package in SVC_MCP_SDK):
// it starts `svc mcp` (argv[2..]) over stdio, lists the tools, calls
// greet and broken, and prints what it saw as one JSON object.
const path = require("node:path");
const sdk = process.env.SVC_MCP_SDK;
const { Client } = require(path.join(sdk, "dist/cjs/client/index.js"));
const { StdioClientTransport } = require(path.join(sdk, "dist/cjs/client/stdio.js"));

async function main() {
  const [command, ...args] = process.argv.slice(2);
  const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
  const client = new Client({ name: "svc-ts-test", version: "1.0.0" });
  await client.connect(transport);
  const { tools } = await client.listTools();
  const greet = await client.callTool({ name: "greet", arguments: { text: "from node" } });
  const broken = await client.callTool({ name: "broken", arguments: { input: 1 } });
  await client.close();
  const schemas = Object.fromEntries(tools.map((t) => [t.name, t.inputSchema]));
  process.stdout.write(JSON.stringify({ schemas, greet, broken }) + "\n");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
