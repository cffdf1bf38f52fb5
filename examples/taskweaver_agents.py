"""A Planner and a CodeInterpreter with the seed's background compaction (seed 000).

Fifteen rounds of a data-analysis session. Each agent builds its compactor as
the seed's "Agent Integration" does: its own ``ContextCompactor`` (its own
contextfold view, prompt file and filter), registered with the memory and
started; its ``compose_prompt`` assembles ``[system] + [compaction] +
rounds[compaction.end_index:]``. The agents' replies are scripted, so only the
compactions call a model: the offline stand-in by default (no network), or any
model ``contextfold.get_model`` knows::

    python examples/taskweaver_agents.py
    python examples/taskweaver_agents.py --model openai:gpt-4o-mini
    python examples/taskweaver_agents.py --config my_config.toml --latency 0

Each round prints both prompts' sizes; a compaction is printed when an agent
first sees it, which is after the rounds that went on while it was being made.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextfold import LLM, Completion, get_model
from contextfold.core.messages import Message
from contextfold.integrations.taskweaver import (
    CompactedMessage,
    CompactionSettings,
    ContextCompactor,
    Memory,
    Post,
    Round,
    load_config,
)
from contextfold.llm.offline import OfflineModel

HERE = Path(__file__).resolve().parent

# (user query, planner's instruction, code interpreter's result, planner's answer);
# an answer of None marks a round that fails.
STEPS: list[tuple[str, str, str, str | None]] = [
    (
        "Load sales_2023.csv and tell me what is in it.",
        "Load sales_2023.csv into a DataFrame and describe its columns.",
        "df = pd.read_csv('sales_2023.csv')  # 48210 rows: date, region, product, units, price",
        "The file has 48210 sales with date, region, product, units and price.",
    ),
    (
        "Are there missing values?",
        "Count the missing values per column of df.",
        "df.isna().sum() -> price: 312 missing, others complete",
        "Only price has gaps: 312 rows.",
    ),
    (
        "Fill the missing prices with the median price of the product.",
        "Fill missing price with the median price per product.",
        "df['price'] = df.groupby('product')['price'].transform(lambda s: s.fillna(s.median()))",
        "Missing prices are now filled with each product's median.",
    ),
    (
        "Add a revenue column.",
        "Add revenue = units * price to df.",
        "df['revenue'] = df['units'] * df['price']  # total revenue 18.4M",
        "Revenue is added; the year's total is 18.4M.",
    ),
    (
        "Which region sells the most?",
        "Sum revenue by region and sort descending.",
        "by_region = df.groupby('region')['revenue'].sum() -> West 6.1M, North 4.9M, South 4.2M, East 3.2M",
        "West leads with 6.1M, then North 4.9M, South 4.2M and East 3.2M.",
    ),
    (
        "Plot revenue by region with seaborn.",
        "Draw a seaborn bar chart of by_region.",
        "ModuleNotFoundError: No module named 'seaborn'",
        None,
    ),
    (
        "Use matplotlib for the region chart then.",
        "Draw a matplotlib bar chart of by_region and save it as region_revenue.png.",
        "plt.bar(by_region.index, by_region.values); plt.savefig('region_revenue.png')",
        "The chart is saved as region_revenue.png.",
    ),
    (
        "How does revenue move month by month?",
        "Resample revenue by month.",
        "monthly = df.set_index('date')['revenue'].resample('M').sum() -> low 1.1M in Feb, high 2.0M in Nov",
        "Revenue climbs from 1.1M in February to 2.0M in November.",
    ),
    (
        "Which five products earn the most?",
        "List the five products with the highest revenue.",
        "top5 = df.groupby('product')['revenue'].sum().nlargest(5) -> Aurora, Breeze, Cinder, Drift, Ember",
        "Top five: Aurora, Breeze, Cinder, Drift and Ember.",
    ),
    (
        "Is Aurora strong in every region?",
        "Break Aurora's revenue down by region.",
        "aurora = df[df['product'] == 'Aurora'].groupby('region')['revenue'].sum() -> West 41%, East 9%",
        "Aurora is strong in the West (41%) and weak in the East (9%).",
    ),
    (
        "Flag outlier orders.",
        "Flag orders whose units are more than 3 standard deviations above the mean.",
        "outliers = df[df['units'] > df['units'].mean() + 3 * df['units'].std()]  # 87 orders",
        "87 orders are outliers by units.",
    ),
    (
        "Who placed the outlier orders?",
        "Count outlier orders by region.",
        "outliers['region'].value_counts() -> West 52, North 20, South 15",
        "Most outliers (52) come from the West.",
    ),
    (
        "Drop the outliers and recompute revenue by region.",
        "Drop the outlier rows into clean and recompute by_region from it.",
        "clean = df.drop(outliers.index); by_region = clean.groupby('region')['revenue'].sum() -> West 5.4M",
        "Without outliers the West still leads with 5.4M.",
    ),
    (
        "Forecast next quarter's revenue.",
        "Fit a linear trend to monthly revenue and project three months.",
        "forecast = np.polyval(np.polyfit(range(12), monthly.values, 1), [12, 13, 14]) -> 2.1M, 2.2M, 2.2M",
        "The trend projects about 6.5M for next quarter.",
    ),
    (
        "Write the findings to report.md.",
        "Write a markdown report of the findings to report.md.",
        "Path('report.md').write_text(report)  # 5 sections, 1 chart",
        "The report is in report.md with five sections and the region chart.",
    ),
]


class SlowModel:
    """A model that takes ``latency`` seconds a call, so compaction visibly runs in the background."""

    def __init__(self, model: LLM, latency: float) -> None:
        self.model = model
        self.latency = latency
        self.name = model.name

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        time.sleep(self.latency)
        return self.model.complete(messages, max_tokens=max_tokens, schema=schema)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        return self.complete(messages, max_tokens=max_tokens, schema=schema)


class Agent:
    """The seed's role integration: create, register and start a compactor; assemble the view."""

    alias = ""
    system = ""

    def __init__(self, memory: Memory, llm_api: LLM, settings: CompactionSettings) -> None:
        self.compactor: ContextCompactor | None = None
        if settings.enabled:
            self.compactor = ContextCompactor(
                config=settings.compactor_config(self.alias),
                llm_api=llm_api,
                rounds_getter=lambda: memory.conversation.rounds,
            )
            memory.register_compaction_provider(self.alias, self.compactor)
            self.compactor.start()

    def compose_prompt(self, memory: Memory) -> tuple[list[Message], CompactedMessage | None]:
        rounds, compaction = memory.get_role_rounds(self.alias)
        messages: list[Message] = [{"role": "system", "content": self.system}]
        if compaction:
            messages.append({"role": "system", "content": compaction.to_system_message()})
            rounds = rounds[compaction.end_index :]
        messages.extend(self._format_rounds(rounds))
        return messages, compaction

    def uncompacted_prompt(self, memory: Memory) -> list[Message]:
        """The prompt without compaction, to show what compaction saves."""
        rounds, _ = memory.get_role_rounds(self.alias)
        return [{"role": "system", "content": self.system}, *self._format_rounds(rounds)]

    def _format_rounds(self, rounds: list[Round]) -> list[Message]:
        out: list[Message] = []
        for round in rounds:
            for post in round.post_list:
                if post.send_from == self.alias:
                    out.append({"role": "assistant", "content": post.message})
                else:
                    out.append({"role": "user", "content": f"{post.send_from}: {post.message}"})
        return out


class Planner(Agent):
    alias = "Planner"
    system = "You are the Planner: split the user's request into steps for the CodeInterpreter."


class CodeInterpreter(Agent):
    alias = "CodeInterpreter"
    system = "You are the CodeInterpreter: write and run Python for the Planner's instructions."


def run_round(memory: Memory, step: tuple[str, str, str, str | None]) -> Round:
    """One round as TaskWeaver's session plays it: User -> Planner -> CodeInterpreter -> ..."""
    query, instruction, result, answer = step
    round = memory.create_round(query)
    round.add_post(Post.create(query, "User", "Planner"))
    round.add_post(Post.create(instruction, "Planner", "CodeInterpreter"))
    round.add_post(Post.create(result, "CodeInterpreter", "Planner"))
    if answer is None:
        round.change_round_state("failed")
    else:
        round.add_post(Post.create(answer, "Planner", "User"))
        round.change_round_state("finished")
    return round


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="a model spec such as openai:gpt-4o-mini (default: offline)"
    )
    parser.add_argument("--config", default=str(HERE / "taskweaver_config.json"))
    parser.add_argument(
        "--latency", type=float, default=0.3, help="seconds added to each model call"
    )
    parser.add_argument("--pace", type=float, default=0.1, help="seconds the agents take a round")
    args = parser.parse_args(argv)

    settings = load_config(args.config)
    base: LLM = get_model(args.model) if args.model else OfflineModel()
    llm: LLM = SlowModel(base, args.latency) if args.latency > 0 else base
    print(
        f"config {args.config}: compaction {'on' if settings.enabled else 'off'}, "
        f"threshold {settings.threshold}, retain_recent {settings.retain_recent}; model {llm.name}"
    )
    memory = Memory("taskweaver-demo")
    agents: list[Agent] = [Planner(memory, llm, settings), CodeInterpreter(memory, llm, settings)]
    counter = memory.session.counter
    seen: dict[str, CompactedMessage | None] = {a.alias: None for a in agents}

    def show(agent: Agent, compaction: CompactedMessage | None) -> None:
        if compaction is not None and compaction != seen[agent.alias]:
            print(
                f"  [background] {agent.alias} compaction now covers rounds "
                f"{compaction.start_index}-{compaction.end_index} ({len(compaction.summary)} chars)"
            )
        seen[agent.alias] = compaction

    played: list[dict[str, Any]] = []  # each round as it stood when it ended
    for i, step in enumerate(STEPS, start=1):
        began = time.perf_counter()
        round = run_round(memory, step)
        played.append(round.to_dict())
        took = (time.perf_counter() - began) * 1000
        sizes = []
        for agent in agents:
            prompt, compaction = agent.compose_prompt(memory)
            sizes.append(f"{agent.alias} {len(prompt):2} msgs {counter.messages(prompt):4} tok")
            show(agent, compaction)
        print(f"round {i:2} {round.state:8} ({took:4.1f} ms) | " + " | ".join(sizes))
        time.sleep(args.pace)

    print("waiting for the compactions still running ...")
    for agent in agents:
        if agent.compactor is not None:
            agent.compactor.wait_idle(timeout=60)
    for agent in agents:
        prompt, compaction = agent.compose_prompt(memory)
        show(agent, compaction)
        rounds, _ = memory.get_role_rounds(agent.alias)
        full = counter.messages(agent.uncompacted_prompt(memory))
        tail = len(rounds) - (compaction.end_index if compaction else 0)
        print(
            f"{agent.alias}: {len(prompt)} msgs, {counter.messages(prompt)} tok "
            f"({full} tok without compaction); {tail} of {len(rounds)} rounds verbatim"
        )
        if compaction is not None:
            print("  " + compaction.to_system_message()[:240].replace("\n", "\n  "))
    rounds = memory.conversation.rounds
    unchanged = [r.to_dict() for r in rounds] == played
    print(
        f"memory.conversation.rounds: {len(rounds)} rounds "
        f"({sum(r.state == 'failed' for r in rounds)} failed), "
        f"{sum(len(r.post_list) for r in rounds)} posts, "
        f"{'unchanged' if unchanged else 'CHANGED'} by compaction; "
        f"log: {len(memory.session.history())} messages"
    )
    for agent in agents:
        if agent.compactor is not None:
            agent.compactor.stop()
    memory.close()
    return 0 if unchanged else 1


if __name__ == "__main__":
    raise SystemExit(main())
