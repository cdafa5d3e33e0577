"""The approval console in a real browser (Debian's Chromium driven by Playwright) and the MCP Python SDK's client
that cannot elicit (no elicitation callback), for codemode-cli's console tests.

Usage: console.py COMMAND ARGS...
  exec MCP_URL TOKEN TITLE CODE   exec over Streamable HTTP with a bearer token; prints the CodeModeResult
  exec-eliciting MCP_URL TOKEN TITLE CODE
                                  the same from a client that declares elicitation and approves whatever it is asked;
                                  prints {"result": <CodeModeResult>, "asked": [<question>, ...]}
  wait MCP_URL TOKEN RUN_ID       wait on a run; prints the CodeModeResult
  decide CONSOLE TOKEN RUN BUTTON SHOT
                                  signs in, clicks BUTTON ("Approve once", "Approve for this run", "Deny") on the
                                  pending question of RUN, screenshots the pending page before the click into SHOT
                                  (when not "-"); prints {"pending": [run ids before], "after": [run ids after]}
  forge CONSOLE TOKEN RUN         signs in, replaces the form's CSRF token with a forged one and clicks "Approve once";
                                  prints {"status": <HTTP status>, "text": <page text>}
  link URL BUTTON SHOT            opens a single-use link (no sign-in), screenshots it into SHOT (when not "-"),
                                  clicks BUTTON, then posts the form again ("deny"); prints {"status": ..., "text": ...,
                                  "again": {"status": ..., "text": ...}}
  live CONSOLE TOKEN MCP_URL CODE signs in, opens the pending page, then execs CODE as the same principal and waits
                                  for the page to show the new question by itself (server-sent events); prints
                                  {"before": [...], "listed": [...], "result": <CodeModeResult>}
  view CONSOLE TOKEN SHOT         signs in; prints {"pending": [...], "runs": [...], "history": [[who, decision, run],
                                  ...]}; screenshots the runs and history pages into SHOT-runs.png and
                                  SHOT-history.png (when not "-")
"""

import asyncio
import json
import sys

from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from playwright.async_api import async_playwright

CHROMIUM = "/usr/bin/chromium"


async def call(url: str, token: str, tool: str, arguments: dict, elicit=None) -> dict:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http)
    async with http, Client(transport, mode="legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool(tool, arguments)
    return result.structured_content


async def sign_in(page, console: str, token: str) -> None:
    await page.goto(f"{console}/login")
    await page.get_by_label("Token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{console}/")


async def runs_listed(page, selector: str) -> list:
    return await page.eval_on_selector_all(selector, "nodes => nodes.map(n => n.dataset.run)")


async def browser(command: str, args: list) -> None:
    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = await chromium.new_page(viewport={"width": 1100, "height": 700})
        if command == "decide":
            console, token, run, button, shot = args
            await sign_in(page, console, token)
            before = await runs_listed(page, ".card[data-run]")
            if shot != "-":
                await page.screenshot(path=shot, full_page=True)
            card = page.locator(f'.card[data-run="{run}"]')
            await card.get_by_role("button", name=button, exact=True).click()
            await page.wait_for_url(f"{console}/")
            after = await runs_listed(page, ".card[data-run]")
            print(json.dumps({"pending": before, "after": after}))
        elif command == "forge":
            console, token, run = args
            await sign_in(page, console, token)
            card = page.locator(f'.card[data-run="{run}"]')
            await card.locator('input[name="csrf"]').evaluate("input => input.value = 'f'.repeat(64)")
            async with page.expect_response(f"{console}/decide") as answer:
                await card.get_by_role("button", name="Approve once", exact=True).click()
            response = await answer.value
            print(json.dumps({"status": response.status, "text": await page.inner_text("main")}))
        elif command == "link":
            url, button, shot = args
            await page.goto(url)
            if shot != "-":
                await page.screenshot(path=shot, full_page=True)
            csrf = await page.locator('input[name="csrf"]').input_value()
            async with page.expect_response(lambda r: r.request.method == "POST") as answer:
                await page.get_by_role("button", name=button, exact=True).click()
            response = await answer.value
            text = await page.inner_text("main")
            # The same form sent again from this browser (its cookie and token): a second use of the link.
            again = await page.request.post(url, form={"answer": "deny", "csrf": csrf})
            print(json.dumps({"status": response.status, "text": text, "again": {"status": again.status, "text": await again.text()}}))
        elif command == "live":
            console, token, url, code = args
            await sign_in(page, console, token)
            before = await runs_listed(page, ".card[data-run]")
            result = await call(url, token, "exec", {"title": "live", "code": code})
            await page.wait_for_selector(f'.card[data-run="{result["runId"]}"]')
            listed = await runs_listed(page, ".card[data-run]")
            print(json.dumps({"before": before, "listed": listed, "result": result}))
        elif command == "view":
            console, token, shot = args
            await sign_in(page, console, token)
            pending = await runs_listed(page, ".card[data-run]")
            await page.goto(f"{console}/runs")
            runs = await runs_listed(page, ".card[data-run]")
            if shot != "-":
                await page.screenshot(path=f"{shot}-runs.png", full_page=True)
            await page.goto(f"{console}/history")
            history = await page.eval_on_selector_all(
                "tr[data-run]",
                "rows => rows.map(r => [r.cells[1].innerText, r.cells[2].innerText, r.dataset.run])",
            )
            if shot != "-":
                await page.screenshot(path=f"{shot}-history.png", full_page=True)
            print(json.dumps({"pending": pending, "runs": runs, "history": history}))
        else:
            raise SystemExit(f"unknown command {command}")
        await chromium.close()


async def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "exec":
        url, token, title, code = args
        print(json.dumps(await call(url, token, "exec", {"title": title, "code": code})))
    elif command == "exec-eliciting":
        url, token, title, code = args
        asked: list[str] = []

        async def elicit(_context, params: types.ElicitRequestParams):
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"decision": "approve"})

        result = await call(url, token, "exec", {"title": title, "code": code}, elicit)
        print(json.dumps({"result": result, "asked": asked}))
    elif command == "wait":
        url, token, run = args
        print(json.dumps(await call(url, token, "wait", {"runId": run})))
    else:
        await browser(command, args)


asyncio.run(main())
