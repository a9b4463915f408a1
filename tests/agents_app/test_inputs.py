"""A run's input: a string or user messages with files, validated before anything is written."""

import base64

import pytest

from agents_app.definitions.inputs import MAX_FILE_BYTES, InvalidInput, input_messages
from sessions_app.stores.types import MessageRole

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG").decode()


def test_a_string_is_one_user_message():
    (message,) = input_messages("Hello")
    assert (message.role, message.content, message.parts) == (MessageRole.USER, "Hello", [])


def test_user_messages_keep_metadata_and_carry_files_as_parts():
    messages = input_messages(
        [
            {"content": "Look", "metadata": {"lang": "en"},
             "files": [{"data": PNG, "mediaType": "image/png", "filename": "a.png"}]},
            {"role": "user", "content": "Thanks"},
        ]
    )  # fmt: skip

    assert [m.content for m in messages] == ["Look", "Thanks"]
    assert messages[0].metadata == {"lang": "en"}
    assert messages[0].parts == [
        {"type": "file", "mediaType": "image/png", "url": PNG, "filename": "a.png"}
    ]


@pytest.mark.parametrize(
    ("message", "location"),
    [
        ([], "message"),
        (42, "message"),
        ([{"content": "x", "role": "assistant"}], "message.0.role"),
        ([{"content": "x", "files": [{"data": "plain", "mediaType": "text/plain"}]}],
         "message.0.files.0.data"),
        ([{"content": "x", "files": [{"data": "data:a/b;base64,@@", "mediaType": "a/b"}]}],
         "message.0.files.0.data"),
        ([{"content": "x", "files": [{"data": PNG, "mediaType": "not a type"}]}],
         "message.0.files.0.mediaType"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_where(message, location):
    with pytest.raises(InvalidInput) as caught:
        input_messages(message)

    assert caught.value.http_status == 400
    assert location in {p["location"] for p in caught.value.details["problems"]}


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("a\x00b", "a NUL character"),
        ("a\ud800b", "an unpaired surrogate"),
        ([{"content": "x", "metadata": {"n\x00te": 1}}], "a NUL character"),
    ],
)
def test_what_no_database_stores_is_refused(message, problem):
    with pytest.raises(InvalidInput) as caught:
        input_messages(message)

    assert caught.value.details["problems"] == [
        {"location": "message", "problem": f"holds {problem}, which no database stores"}
    ]


def test_files_over_the_size_limit_are_refused():
    big = (
        "data:application/octet-stream;base64,"
        + base64.b64encode(b"\0" * (MAX_FILE_BYTES + 1)).decode()
    )
    with pytest.raises(InvalidInput, match="larger than"):
        input_messages([{"content": "x", "files": [{"data": big, "mediaType": "text/plain"}]}])
