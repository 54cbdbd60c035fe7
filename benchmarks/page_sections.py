"""Rewrite one `## ` section of a Markdown page in place, leaving the others as they are."""

from __future__ import annotations


def write_section(path: str, heading: str, text: str) -> None:
    """Put `text` (starting with `heading`) in place of that section of `path`.

    The section runs from its heading to the next `## ` heading; it is appended at
    the end when the page has none yet (and the page is made when missing).
    """
    try:
        with open(path, encoding="utf-8") as page:
            content = page.read()
    except FileNotFoundError:
        content = ""
    start = content.find(heading)
    if start < 0:
        content = content.rstrip("\n") + ("\n\n" if content else "") + text
    else:
        end = content.find("\n## ", start + len(heading))
        rest = content[end + 1 :] if end >= 0 else ""
        content = content[:start] + text + ("\n" + rest if rest else "")
    with open(path, "w", encoding="utf-8") as page:
        page.write(content)


def sections_from(path: str, headings: tuple[str, ...]) -> str:
    """The sections of `path` under any of `headings`, in page order ("" when none).

    Lets a script that writes a whole page keep the sections other scripts wrote.
    """
    try:
        with open(path, encoding="utf-8") as page:
            content = page.read()
    except FileNotFoundError:
        return ""
    kept = []
    for heading in headings:
        start = content.find(heading)
        if start >= 0:
            end = content.find("\n## ", start + len(heading))
            kept.append((start, content[start : end + 1 if end >= 0 else len(content)]))
    return "\n".join(text.rstrip("\n") + "\n" for _, text in sorted(kept))
