"""The context blocks of a session and its frozen system prompt (reference 002).

What blocks and providers are is in `sessions_app.memory.blocks`. The system prompt is rendered
once and stored (`SystemPrompt`): block writes reach it only when it is refreshed, so the prompt
prefix a model provider caches stays the same between turns.
"""

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from sessions_app.errors import SessionNotFound
from sessions_app.memory.blocks import (
    ContextBlock,
    ContextBlockSpec,
    ContextProvider,
    ProviderFactory,
    SearchProvider,
    SkillProvider,
    WritableContextProvider,
    is_provider,
    is_search_provider,
    is_skill_provider,
    is_writable_provider,
)
from sessions_app.memory.errors import (
    ContextBlockConfigured,
    ContextBlockExists,
    ContextBlockKeyed,
    ContextBlockNotFound,
    ContextBlockReadonly,
    ContextBlockTooLarge,
    ContextBlockUnsupported,
    InvalidContextBlock,
)
from sessions_app.memory.keys import context_entry_key
from sessions_app.memory.prompt import render_system_prompt
from sessions_app.memory.providers import DatabaseContextProvider
from sessions_app.memory.tokens import estimate_string_tokens
from sessions_app.models import AgentSession, SystemPrompt
from sessions_app.models import ContextBlock as StoredBlock

__all__ = [
    "ContextBlock",
    "ContextBlockSpec",
    "ContextProvider",
    "ProviderFactory",
    "SearchProvider",
    "SessionContext",
    "SkillProvider",
    "WritableContextProvider",
    "is_search_provider",
    "is_skill_provider",
    "is_writable_provider",
    "render_system_prompt",
]


class SessionContext:
    """The context blocks of one session: the configured ones, then those added at run time.

    Blocks are read from their providers on first use and kept until `refresh_system_prompt`.
    Which skills are loaded lives in the conversation, not here: a caller that rebuilds the
    context for a later step restores them (`restore_loaded_skills`) from its history.
    """

    def __init__(
        self,
        session_id: str,
        specs: Iterable[ContextBlockSpec],
        *,
        on_skill_unload: Callable[[str, str], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self._configured: dict[str, ContextBlockSpec] = {}
        for spec in specs:
            if spec.label in self._configured:
                raise ContextBlockExists(spec.label)
            self._configured[spec.label] = spec
        self._on_skill_unload = on_skill_unload
        self._providers: dict[str, Any] = {}  # Duck-typed: see `memory.blocks`.
        self._blocks: dict[str, ContextBlock] | None = None
        self._loaded_skills: dict[str, None] = {}  # "label:key" ids, in loading order

    def get_block(self, label: str) -> ContextBlock | None:
        """Return the block `label`, or None if the session has no such block."""
        return self._load().get(label)

    def get_blocks(self) -> list[ContextBlock]:
        """Return every block, configured ones first, in prompt order."""
        return list(self._load().values())

    def replace_block(self, label: str, content: str) -> ContextBlock:
        """Write `content` as the whole of the writable block `label`."""
        block = self._block(label)
        if not block.writable:
            raise ContextBlockReadonly(label)
        if block.is_skill or block.is_searchable:
            raise ContextBlockKeyed(label)
        tokens = estimate_string_tokens(content)
        if block.max_tokens is not None and tokens > block.max_tokens:
            raise ContextBlockTooLarge(label, tokens=tokens, max_tokens=block.max_tokens)
        self._providers[label].set(content)
        return self._keep(replace(block, content=content, tokens=tokens))

    def append_block(self, label: str, content: str) -> ContextBlock:
        """Add `content` to the end of block `label`, on a new line unless it starts one."""
        current = self._block(label).content
        separator = "\n" if current and not content.startswith("\n") else ""
        return self.replace_block(label, current + separator + content)

    def add_block(self, spec: ContextBlockSpec) -> ContextBlock:
        """Add a database-backed block to the session, for this and every later context.

        It joins the system prompt when the prompt is refreshed.
        """
        blocks = self._load()
        if spec.provider is not None:
            raise InvalidContextBlock(
                f'Block "{spec.label}" is added at run time, so it is stored in the database: '
                "its spec takes no provider.",
                label=spec.label,
            )
        if spec.label in blocks:
            raise ContextBlockExists(spec.label)
        declared = {
            "added_at_run_time": True,
            "description": spec.description,
            "max_tokens": spec.max_tokens,
        }
        with transaction.atomic():
            row, created = StoredBlock.objects.select_for_update().get_or_create(
                session_id=self.session_id, label=spec.label, defaults=declared
            )
            if not created:
                if row.added_at_run_time:
                    raise ContextBlockExists(spec.label)
                for field, value in declared.items():
                    setattr(row, field, value)
                row.updated_at = timezone.now()
                row.save(update_fields=[*declared, "updated_at"])
        return self._keep(self._read(spec))

    def remove_block(self, label: str) -> bool:
        """Remove the block `label` added at run time, and its content; return whether it was.

        The system prompt keeps it until it is refreshed.
        """
        self._load()
        if label in self._configured:
            raise ContextBlockConfigured(label)
        removed, _ = StoredBlock.objects.filter(
            session_id=self.session_id, label=label, added_at_run_time=True
        ).delete()
        self._load().pop(label, None)
        self._providers.pop(label, None)
        return removed > 0

    def set_entry(
        self, label: str, content: str, *, title: str | None = None, description: str | None = None
    ) -> str:
        """Write `content` as an entry of the skill or search block `label`; return its key.

        The key is the slug of `title`, or of `content` with a hash of it (the reference's
        keys), so writing the same title again replaces that entry.
        """
        block = self._block(label)
        if not (block.is_skill or block.is_searchable):
            raise ContextBlockUnsupported(label, "is not a skill or search provider")
        if not block.writable:
            raise ContextBlockUnsupported(label, "does not support writes")
        key = context_entry_key(title, content)
        provider = self._providers[label]
        if block.is_skill:
            provider.set(key, content, description if description is not None else title)
        else:
            provider.set(key, content)
        listing = provider.get() or ""
        self._keep(replace(block, content=listing, tokens=estimate_string_tokens(listing)))
        return key

    def load_skill(self, label: str, key: str) -> str | None:
        """Return the skill `key` of block `label` and count it loaded; None if there is none."""
        if not self._block(label).is_skill:
            raise ContextBlockUnsupported(label, "is not a skill provider")
        content = self._providers[label].load(key)
        if content is not None:
            self._loaded_skills[f"{label}:{key}"] = None
        return content

    def unload_skill(self, label: str, key: str) -> bool:
        """Count the skill unloaded and tell `on_skill_unload`; return whether it was loaded."""
        skill_id = f"{label}:{key}"
        if skill_id not in self._loaded_skills:
            return False
        del self._loaded_skills[skill_id]
        if self._on_skill_unload is not None:
            self._on_skill_unload(label, key)
        return True

    def loaded_skills(self) -> list[str]:
        """Return the loaded skills as `label:key` ids, in loading order."""
        return list(self._loaded_skills)

    def restore_loaded_skills(self, skill_ids: Iterable[str]) -> None:
        """Set which skills are loaded, as `label:key` ids (read back from the history)."""
        self._loaded_skills = dict.fromkeys(skill_ids)

    def clear_skill_state(self) -> None:
        """Count no skill loaded (the history they were loaded in is gone)."""
        self._loaded_skills.clear()

    def search(self, label: str, query: str) -> str | None:
        """Return the search block `label`'s best entries for `query`, or None."""
        if not self._block(label).is_searchable:
            raise ContextBlockUnsupported(label, "is not a search provider")
        return self._providers[label].search(query)

    def freeze_system_prompt(self) -> str:
        """Return the session's stored system prompt; render and store it if there is none."""
        stored = self._stored_prompt()
        if stored is not None:
            return stored
        prompt = render_system_prompt(self.get_blocks())
        row, _ = SystemPrompt.objects.get_or_create(
            session_id=self.session_id, defaults={"text": prompt}
        )
        return row.text  # Another worker's, if it stored one first.

    def refresh_system_prompt(self) -> str:
        """Re-read every block from its provider, then render, store and return the prompt."""
        self._blocks = None
        prompt = render_system_prompt(self.get_blocks())
        SystemPrompt.objects.update_or_create(
            session_id=self.session_id,
            defaults={"text": prompt, "rendered_at": timezone.now()},
        )
        return prompt

    def system_prompt_for_estimate(self) -> str:
        """Return the stored system prompt, else the current rendering, storing nothing."""
        stored = self._stored_prompt()
        return stored if stored is not None else render_system_prompt(self.get_blocks())

    def _load(self) -> dict[str, ContextBlock]:
        if self._blocks is None:
            if not AgentSession.objects.filter(pk=self.session_id).exists():
                raise SessionNotFound(self.session_id)
            added = StoredBlock.objects.filter(
                session_id=self.session_id, added_at_run_time=True
            ).exclude(label__in=list(self._configured))
            specs = [
                *self._configured.values(),
                *(
                    ContextBlockSpec(row.label, row.description, row.max_tokens)
                    for row in added.order_by("pk")
                ),
            ]
            self._blocks = {spec.label: self._read(spec) for spec in specs}
        return self._blocks

    def _read(self, spec: ContextBlockSpec) -> ContextBlock:
        provider = self._providers.get(spec.label)
        if provider is None:
            provider = self._providers[spec.label] = self._provider(spec)
        content = provider.get() or ""
        return ContextBlock(
            label=spec.label,
            description=spec.description,
            content=content,
            tokens=estimate_string_tokens(content),
            max_tokens=spec.max_tokens,
            writable=is_writable_provider(provider),
            is_skill=is_skill_provider(provider),
            is_searchable=is_search_provider(provider),
        )

    def _provider(self, spec: ContextBlockSpec) -> Any:
        if spec.provider is None:
            return DatabaseContextProvider(self.session_id, spec.label)
        if is_provider(spec.provider):
            return spec.provider
        return spec.provider(self.session_id, spec.label)

    def _block(self, label: str) -> ContextBlock:
        block = self._load().get(label)
        if block is None:
            raise ContextBlockNotFound(label)
        return block

    def _keep(self, block: ContextBlock) -> ContextBlock:
        self._load()[block.label] = block
        return block

    def _stored_prompt(self) -> str | None:
        rows = SystemPrompt.objects.filter(session_id=self.session_id)
        return rows.values_list("text", flat=True).first()
