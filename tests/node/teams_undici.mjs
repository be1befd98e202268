// Fetches each URL given on the command line with undici's ProxyAgent, the proxy URL holding a
// job's credentials (`http://job:token@127.0.0.1:port`: ProxyAgent sends them as
// `Proxy-Authorization: Basic`). Prints one line per URL: "<status> <body>" when it was answered,
// "error <message>" when undici gave up (a 407 to its CONNECT surfaces this way). Used by
// tests/it/teams_clients.rs; NODE_EXTRA_CA_CERTS must name courtesy's CA. Every wait is bounded.
import { ProxyAgent, request } from 'undici';

const [proxy, ...urls] = process.argv.slice(2);
if (!proxy || urls.length === 0) {
  console.error('usage: node teams_undici.mjs <proxy url with credentials> <url>...');
  process.exit(2);
}
const agent = new ProxyAgent({ uri: proxy, headersTimeout: 20_000, bodyTimeout: 20_000 });
for (const url of urls) {
  try {
    const { statusCode, body } = await request(url, {
      dispatcher: agent,
      signal: AbortSignal.timeout(20_000),
    });
    const text = await body.text();
    console.log(`${statusCode} ${text}`);
  } catch (err) {
    console.log(`error ${String(err.message).split('\n')[0]}`);
  }
}
await agent.close();
