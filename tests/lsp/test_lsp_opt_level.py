"""`kina.validate.optLevel`: the level Build & validate builds at.  Its own module (its
own server): once a client has set the level, the setting stays for that server."""
from __future__ import annotations

import pytest
from conftest import MODULE_LOOP, open_example, published
from lsprotocol import types as lsp

from kina_lsp.settings import Settings


async def _validate(client, uri) -> dict:
    return await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kina.buildAndValidate", arguments=[uri]))


@MODULE_LOOP
async def test_build_and_validate_builds_at_the_level_the_client_sets(client):
    uri, _ = open_example(client, "ad_reduce_sum.kina")
    await published(client, uri, 1)
    for level in (2, 0):
        client.set_configuration({"validate": {"optLevel": level}}, section="kina")
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"kina": {"validate": {"optLevel": level}}}))
        result = await _validate(client, uri)
        assert result["ok"], result["message"]
        assert result["message"].endswith(f"match the interpreter at -O{level})"), result["message"]
        assert client.messages[-1].message == result["message"]


@pytest.mark.parametrize("raw, want", [
    ({"validate": {"optLevel": 2}}, 2), ({"kina.validate.optLevel": 3}, 3), ({"validate.optLevel": "1"}, 1),
    ({"validate": {"optLevel": 9}}, 3), ({"validate": {"optLevel": -4}}, 0),
    ({"validate": {"optLevel": True}}, None), ({"validate": {"optLevel": "fast"}}, None), ({}, None)])
def test_the_level_setting_is_read_clamped_and_ill_typed_values_ignored(raw, want):
    s = Settings()
    s.update(raw)
    assert s.opt_level == want
