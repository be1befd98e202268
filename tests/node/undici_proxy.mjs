// Fetches each URL given on the command line through the proxy with undici's ProxyAgent (default
// options), printing "<status> <body length>" per URL. NODE_EXTRA_CA_CERTS must name courtesy's CA.
import { ProxyAgent, request } from 'undici';

const [proxy, ...urls] = process.argv.slice(2);
const agent = new ProxyAgent(proxy);
for (const url of urls) {
  const { statusCode, body } = await request(url, { dispatcher: agent });
  const text = await body.text();
  console.log(`${statusCode} ${text.length}`);
}
await agent.close();
