"""A templated business archive with ground truth, for boilerplate-aware near-duplicate detection.

``generate_archive`` writes letters and commercial offers in English and Russian. Each company has a
letterhead, a long legal footer and a signature block that every one of its documents carries; the
bodies vary. Ground truth (``true_cluster``): a body "sent" to several clients is one cluster, whose
copies change only names, amounts, dates and ids; every other document is its own cluster, although it
shares the whole template with hundreds of others. That is the case where plain MinHash merges
different documents, because the template dominates their shingle sets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["generate_archive"]

_EN = {
    "companies": ["Northwind Trading Ltd", "Bluefield Industrial Supply", "Harbor Point Logistics"],
    "streets": ["14 King Street, Manchester M2 4LQ", "210 Harbour Road, Leith EH6 6LX", "3 Mill Lane, Leeds LS1 5AA"],
    "footer": [
        "This message and any attachments are confidential and intended solely for the addressee.",
        "If you have received this message in error, please notify the sender immediately and delete it.",
        "Any unauthorised copying, disclosure or distribution of the material in this message is prohibited.",
        "{company} is registered in England and Wales under company number {reg}, registered office {street}.",
        "Prices quoted are exclusive of VAT unless stated otherwise and are subject to our general terms of sale.",
        "Our general terms and conditions apply to all offers, orders and deliveries and are available on request.",
        "We process personal data in accordance with applicable data protection law; see our privacy notice.",
        "Offers are valid for thirty days from the date of issue unless another period is stated in the offer.",
        "Title to the goods passes to the buyer only after payment has been received in full.",
        "Nothing in this message constitutes a binding contract unless confirmed in writing by an authorised "
        "signatory.",
        "Delivery dates are estimates and we accept no liability for delays caused by carriers or force majeure.",
        "Goods must be inspected on arrival and any damage or shortage reported in writing within forty-eight hours.",
        "Returns are accepted only with our prior written consent and in the original undamaged packaging.",
        "Late payment may attract interest and compensation under the Late Payment of Commercial Debts Act 1998.",
        "Our liability for any claim is limited to the invoice value of the goods concerned.",
        "Technical data and drawings remain our property and may not be passed to third parties without consent.",
        "Please quote the reference number of this letter in all correspondence and payments.",
        "Emails are scanned for viruses but we cannot guarantee that this message or its attachments are virus free.",
        "Please consider the environment before printing this email and its attachments.",
        "Our office hours are Monday to Friday, eight thirty to five thirty, excluding bank holidays.",
    ],
    "products": ["steel gate valve DN50", "industrial fan 450 W", "stretch film 23 micron", "hydraulic hose 1/2 inch",
                 "LED panel 36 W", "label printer LP-200", "office chair Ergo Plus", "centrifugal pump CP-40",
                 "safety gloves (12 pairs)", "copper cable 3x2.5", "pallet truck 2.5 t", "air filter F7"],
    "names": ["John Carter", "Emily Stone", "Michael Reed", "Sarah Bennett", "David Clarke", "Laura Hughes",
              "James Wilson", "Olivia Turner", "Robert Hall", "Sophie Wright"],
    "clients": ["Acme Retail", "Greenway Foods", "Summit Engineering", "Riverside Clinic", "Oakland Builders",
                "Silverline Hotels", "Metro Print", "Brightstar Schools"],
    "bodies": [
        ["Dear {name},", "Thank you for your enquiry of {date}.",
         "Please find below our offer {ref} for {client}.", "{items}",
         "The total amount of the offer is {amount} GBP excluding VAT.",
         "Delivery can be made within {days} working days after your written confirmation.",
         "We would be glad to answer any questions about the offer."],
        ["Dear {name},", "Our records show that invoice {ref} of {date} for {client} remains unpaid.",
         "The outstanding amount is {amount} GBP.", "{items}",
         "Please arrange payment within {days} days or contact us if you believe this notice is in error."],
        ["Dear {name},", "As agreed on {date}, we confirm the meeting with {client} about order {ref}.",
         "We will bring samples of the following goods:", "{items}",
         "The estimated budget discussed was {amount} GBP, with delivery in {days} days."],
    ],
    "closing": "Kind regards,\n{signer}\nSales Manager, {company}\nTel. {phone}",
    "letterhead": "{company}\n{street}\nTel. {phone} | sales@{domain}.co.uk | www.{domain}.co.uk\nVAT No. GB{vat}",
}
_RU = {
    "companies": ["ООО «Вектор Снаб»", "АО «Северная промышленная компания»", "ООО «ТехноРесурс»"],
    "streets": ["г. Москва, ул. Лесная, д. 7, офис 12", "г. Санкт-Петербург, Невский пр., д. 88",
                "г. Екатеринбург, ул. Малышева, д. 51"],
    "footer": [
        "Настоящее письмо и все вложения являются конфиденциальными и предназначены только для адресата.",
        "Если вы получили это письмо по ошибке, пожалуйста, сообщите отправителю и удалите его.",
        "Любое копирование, распространение или раскрытие содержания письма без согласия отправителя запрещено.",
        "{company}, ОГРН {reg}, юридический адрес: {street}.",
        "Цены указаны с учетом НДС, если иное не оговорено в предложении, и действуют при условии предоплаты.",
        "Общие условия поставки применяются ко всем предложениям и заказам и предоставляются по запросу.",
        "Мы обрабатываем персональные данные в соответствии с Федеральным законом № 152-ФЗ «О персональных данных».",
        "Предложение действительно в течение тридцати дней с даты его направления, если не указан иной срок.",
        "Право собственности на товар переходит к покупателю после полной оплаты.",
        "Настоящее письмо не является офертой и не влечет обязательств до подписания договора уполномоченным лицом.",
        "Сроки поставки являются ориентировочными; мы не отвечаем за задержки по вине перевозчика или форс-мажора.",
        "Товар подлежит осмотру при получении, о недостаче или повреждении необходимо сообщить письменно "
        "в течение двух суток.",
        "Возврат товара принимается только с нашего письменного согласия и в неповрежденной упаковке.",
        "За просрочку оплаты может начисляться неустойка в соответствии с условиями договора поставки.",
        "Наша ответственность по любым претензиям ограничена стоимостью соответствующего товара по счету.",
        "Техническая документация и чертежи являются нашей собственностью и не подлежат передаче третьим лицам.",
        "Пожалуйста, указывайте номер настоящего письма во всей переписке и в платежных документах.",
        "Письма проверяются антивирусом, однако мы не можем гарантировать отсутствие вирусов во вложениях.",
        "Пожалуйста, подумайте об окружающей среде, прежде чем распечатывать это письмо.",
        "Наш офис работает с понедельника по пятницу с девяти до восемнадцати часов, кроме праздничных дней.",
    ],
    "products": ["задвижка стальная Ду50", "вентилятор промышленный 450 Вт", "стрейч-пленка 23 мкм",
                 "рукав гидравлический 1/2 дюйма", "светильник LED 36 Вт", "принтер этикеток ПЭ-200",
                 "кресло офисное Эрго Плюс", "насос центробежный ЦН-40", "перчатки рабочие (12 пар)",
                 "кабель медный 3х2,5", "тележка гидравлическая 2,5 т", "фильтр воздушный F7"],
    "names": ["Иван Петров", "Елена Соколова", "Андрей Смирнов", "Ольга Кузнецова", "Дмитрий Попов",
              "Наталья Васильева", "Сергей Морозов", "Татьяна Новикова", "Алексей Федоров", "Мария Волкова"],
    "clients": ["ООО «Альфа Ритейл»", "АО «Зеленый путь»", "ООО «Вершина Инжиниринг»", "ГБУЗ «Городская клиника»",
                "ООО «Строй Дом»", "АО «Серебряные отели»", "ООО «Метро Принт»", "АНО «Светлая школа»"],
    "bodies": [
        ["Уважаемый(ая) {name}!", "Благодарим за ваш запрос от {date}.",
         "Направляем коммерческое предложение № {ref} для {client}.", "{items}",
         "Общая сумма предложения составляет {amount} руб.",
         "Поставка возможна в течение {days} рабочих дней после письменного подтверждения.",
         "Будем рады ответить на ваши вопросы по предложению."],
        ["Уважаемый(ая) {name}!", "По нашим данным, счет № {ref} от {date} для {client} не оплачен.",
         "Сумма задолженности составляет {amount} руб.", "{items}",
         "Просим произвести оплату в течение {days} дней или связаться с нами, если это уведомление ошибочно."],
        ["Уважаемый(ая) {name}!", "Как договорились {date}, подтверждаем встречу с {client} по заказу № {ref}.",
         "Мы привезем образцы следующих товаров:", "{items}",
         "Обсуждаемый бюджет составил {amount} руб., срок поставки {days} дней."],
    ],
    "closing": "С уважением,\n{signer}\nменеджер по продажам, {company}\nТел. {phone}",
    "letterhead": "{company}\n{street}\nТел. {phone} | sales@{domain}.ru | www.{domain}.ru\nИНН {vat}",
}


_NOTES = {
    "en": ["The {p} is supplied with a {w}-month warranty and a test certificate.",
           "Packing: {n} units per pallet, pallet weight about {w} kg.",
           "The {p} can be delivered in {n} batches if your site has limited storage.",
           "For orders above {n} units we add free commissioning by our engineer.",
           "Spare parts for the {p} are kept in stock for at least {w} years.",
           "The {p} complies with the standard EN {n}-{w} and carries the CE mark."],
    "ru": ["{p} поставляется с гарантией {w} месяцев и протоколом испытаний.",
           "Упаковка: {n} единиц на паллете, вес паллеты около {w} кг.",
           "{p} может быть поставлен {n} партиями, если склад на объекте ограничен.",
           "При заказе свыше {n} единиц пусконаладка нашим инженером бесплатно.",
           "Запасные части для позиции {p} хранятся на складе не менее {w} лет.",
           "{p} соответствует ГОСТ {n}-{w} и имеет декларацию соответствия."],
}


def _fill_items(rng, lang, products):
    """An item list and notes on the items: the part of a letter that its copies share."""
    k = int(rng.integers(1, 9))
    picks = rng.choice(len(products), k, replace=False)
    unit = "GBP" if lang == "en" else "руб."
    lines = [f"{i + 1}. {products[p]} - {int(rng.integers(1, 200))} pcs x {rng.integers(5, 5000)}.00 {unit}"
             for i, p in enumerate(picks)]
    notes = [_NOTES[lang][int(j)].format(p=products[picks[int(rng.integers(k))]], n=int(rng.integers(2, 90)),
                                         w=int(rng.integers(2, 900)))
             for j in rng.choice(len(_NOTES[lang]), int(rng.integers(1, 5)), replace=False)]
    return "\n".join(lines) + "\n" + " ".join(notes)


def _slots(rng, pools):
    return {"name": str(rng.choice(pools["names"])), "client": str(rng.choice(pools["clients"])),
            "date": f"{int(rng.integers(1, 29)):02d}.{int(rng.integers(1, 13)):02d}.{int(rng.integers(2015, 2025))}",
            "ref": f"{int(rng.integers(100, 999))}-{int(rng.integers(1000, 9999))}",
            "amount": f"{int(rng.integers(1000, 900000)):,}".replace(",", " "),
            "days": str(int(rng.integers(3, 60)))}


def generate_archive(n_docs: int = 2000, copy_fraction: float = 0.4, seed: int = 0) -> pd.DataFrame:
    """A shuffled archive of ``n_docs`` letters (about half English, half Russian, from six companies).

    About ``copy_fraction`` of the documents are near-copies: a body re-sent with other names, amounts,
    dates and ids (clusters of 2-8 documents); the rest are unique bodies on the same templates.

    Returns a DataFrame with ``id`` (``arc-000001``...), ``text``, ``lang``, ``company``, ``kind``
    (``original`` / ``copy`` / ``unique``) and ``true_cluster`` (the id of the cluster's original).
    """
    rng = np.random.default_rng(seed)
    companies = []
    for lang, pools in (("en", _EN), ("ru", _RU)):
        for c, name in enumerate(pools["companies"]):
            domain = ["northwind", "bluefield", "harborpoint", "vectorsnab", "sevprom", "technoresurs"][
                len(companies)]
            street = pools["streets"][c]
            phone = f"+{44 if lang == 'en' else 7} {int(rng.integers(100, 999))} {int(rng.integers(1000000, 9999999))}"
            values = {"company": name, "street": street, "phone": phone, "domain": domain,
                      "vat": str(int(rng.integers(10 ** 9, 10 ** 10))), "reg": str(int(rng.integers(10 ** 7, 10 ** 8)))}
            footer = " ".join(s.format(**values) for s in pools["footer"])
            signer = str(rng.choice(pools["names"]))
            companies.append({"lang": lang, "pools": pools, "head": pools["letterhead"].format(**values),
                              "foot": footer, "sign": pools["closing"].format(signer=signer, **values)})
    docs = []
    while len(docs) < n_docs:
        comp = companies[int(rng.integers(len(companies)))]
        pools = comp["pools"]
        body_tpl = pools["bodies"][int(rng.integers(len(pools["bodies"])))]
        items = _fill_items(rng, comp["lang"], pools["products"])
        copies = int(rng.integers(1, 8)) if rng.random() < copy_fraction / 2.5 else 0
        cluster = []
        first = _slots(rng, pools)
        for k in range(copies + 1):
            # a copy changes the names, amounts, dates and ids; the client keeps the same delivery terms
            slots = dict(_slots(rng, pools), days=first["days"]) if k else first
            body = "\n".join(line.format(items=items, **slots) for line in body_tpl)
            cluster.append("\n\n".join([comp["head"], body, comp["sign"], comp["foot"]]))
        docs.append((comp, cluster))
    rows = []
    for comp, cluster in docs:
        for k, text in enumerate(cluster):
            kind = "unique" if len(cluster) == 1 else ("original" if k == 0 else "copy")
            rows.append({"text": text, "lang": comp["lang"], "company": comp["head"].split("\n")[0], "kind": kind,
                         "cluster_key": len(rows) - k})
    rows = rows[:n_docs]
    order = rng.permutation(len(rows))
    frame = pd.DataFrame([rows[i] for i in order])
    frame.insert(0, "id", [f"arc-{i + 1:06d}" for i in range(len(frame))])
    id_of_row = dict(zip(order.tolist(), frame["id"]))  # the original comes first in its cluster
    frame["true_cluster"] = [id_of_row[k] for k in frame["cluster_key"]]
    return frame.drop(columns=["cluster_key"])
